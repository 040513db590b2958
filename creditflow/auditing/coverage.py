"""Coverage: what the estimators can see in an env, from groups sampled under a policy.

- ``shared``: the share of steps whose ``state_key`` occurs in another rollout of the same group (what GiGPO's
  step groups and RewardFlow's graph compare);
- ``mixed_groups``: the share of groups whose rollouts have both outcomes (what GRPO needs to give non-zero
  credit);
- ``path_to_success``: the share of steps whose state has a path, along the group's recorded transitions, to
  the end of a successful rollout;
- ``at_trajectory_level[arm]``: per arm, the share of steps whose advantage equals the arm's trajectory-level
  value (:func:`creditflow.auditing.estimators.trajectory_level`).

:func:`reading` turns them into one line.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Sequence

import numpy as np

from creditflow.auditing.estimators import Arm, Columns, advantages, reads_state, trajectory_level
from creditflow.auditing.sim import Episode

SAME = 1e-9  # advantages this close are equal


def shared_share(episodes: Sequence[Episode]) -> float:
    owners: dict = defaultdict(set)
    for e, ep in enumerate(episodes):
        for s in ep.steps:
            owners[(ep.group, s.node.key)].add(e)
    flags = [len(owners[(ep.group, s.node.key)]) > 1 for ep in episodes for s in ep.steps]
    return float(np.mean(flags)) if flags else float("nan")


def mixed_share(episodes: Sequence[Episode]) -> float:
    outcomes: dict = defaultdict(set)
    for ep in episodes:
        outcomes[ep.group].add(bool(ep.success))
    return float(np.mean([len(v) == 2 for v in outcomes.values()])) if outcomes else float("nan")


def path_share(episodes: Sequence[Episode]) -> float:
    by_group: dict = defaultdict(list)
    for ep in episodes:
        by_group[ep.group].append(ep)
    flags = []
    for eps in by_group.values():
        back: dict = defaultdict(set)  # next state -> states with an edge into it
        for ep in eps:
            for s in ep.steps:
                back[s.next_key].add(s.node.key)
        reach = {ep.final_key for ep in eps if ep.success}
        queue = deque(reach)
        while queue:
            for prev in back.get(queue.popleft(), ()):
                if prev not in reach:
                    reach.add(prev)
                    queue.append(prev)
        flags += [s.node.key in reach for ep in eps for s in ep.steps]
    return float(np.mean(flags)) if flags else float("nan")


def coverage(episodes: Sequence[Episode], cols: Columns, arms: Sequence[Arm]) -> dict:
    same = {}
    for arm in arms:
        adv, flat = advantages(arm, cols), trajectory_level(arm, cols)
        same[arm.name] = float(np.mean(np.abs(adv - flat) <= SAME * np.maximum(1.0, np.abs(flat))))
    return {"steps": cols.n, "groups": len({ep.group for ep in episodes}), "shared": shared_share(episodes),
            "mixed_groups": mixed_share(episodes), "path_to_success": path_share(episodes),
            "at_trajectory_level": same, "reads_state": {arm.name: reads_state(arm) for arm in arms}}


def reading(cov: dict, threshold: float = 0.9) -> str:
    """One line: which estimators equal their trajectory-level value on most steps, and what to do."""
    same = cov["at_trajectory_level"]
    stepwise = {a: v for a, v in same.items() if cov["reads_state"][a]}  # arms with step-level credit
    flat = sorted(a for a, v in stepwise.items() if v >= threshold)
    mixed = cov["mixed_groups"]
    parts = []
    if flat:
        share = min(stepwise[a] for a in flat)
        parts.append(f"{' and '.join(flat)} give the trajectory-level value on {100 * share:.0f}% of steps or more "
                     f"here (only {100 * cov['shared']:.0f}% of steps share a state with another rollout): give "
                     "state_key a coarser function")
    elif stepwise:
        lo, hi = min(stepwise.values()), max(stepwise.values())
        parts.append(f"step-level credit acts here: {', '.join(sorted(stepwise))} differ from the trajectory-level "
                     f"value on {100 * (1 - hi):.0f}-{100 * (1 - lo):.0f}% of steps "
                     f"({100 * cov['shared']:.0f}% of steps share a state)")
    else:
        parts.append("no registered estimator reads state_key: every step gets its trajectory's value")
    if mixed < 0.5:
        parts.append(f"only {100 * mixed:.0f}% of groups mix success and failure, so outcome-only credit is 0 in "
                     "the rest: make tasks easier, groups larger or the policy more varied")
    return "; ".join(parts) + "."
