"""Coverage: what the estimators can see in an env, from groups sampled under a policy.

- ``shared``: the share of steps whose ``state_key`` occurs in another rollout of the same group (what GiGPO's
  step groups and RewardFlow's graph compare);
- ``mixed_groups``: the share of groups whose rollouts have both outcomes (what GRPO needs to give non-zero
  credit); ``no_success_groups`` and ``all_success_groups``: the shares of the others;
- ``path_to_success``: the share of steps whose state has a path, along the group's recorded transitions, to
  the end of a successful rollout;
- ``at_trajectory_level[arm]``: per arm, the share of steps whose advantage equals the arm's trajectory-level
  value (:func:`creditflow.auditing.estimators.trajectory_level`).

:func:`reading` turns them into one line, naming the likely cause (groups that do not mix outcomes before a
``state_key`` that shares no state).
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Sequence

import numpy as np

from creditflow.auditing.estimators import Arm, arm_advantages, reads_state, trajectory_level
from creditflow.auditing.sim import Episode
from creditflow.credit.rows import Rows

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


def outcome_shares(episodes: Sequence[Episode]) -> tuple[float, float]:
    """``(share of groups without a success, share of groups of successes only)``."""
    outcomes: dict = defaultdict(list)
    for ep in episodes:
        outcomes[ep.group].append(bool(ep.success))
    if not outcomes:
        return float("nan"), float("nan")
    return (float(np.mean([not any(v) for v in outcomes.values()])),
            float(np.mean([all(v) for v in outcomes.values()])))


def coverage(episodes: Sequence[Episode], cols: Rows, arms: Sequence[Arm]) -> dict:
    same = {}
    for arm in arms:
        adv, flat = arm_advantages(arm, cols), trajectory_level(arm, cols)
        same[arm.name] = float(np.mean(np.abs(adv - flat) <= SAME * np.maximum(1.0, np.abs(flat))))
    no_success, all_success = outcome_shares(episodes)
    return {"steps": cols.n, "groups": len({ep.group for ep in episodes}), "shared": shared_share(episodes),
            "mixed_groups": mixed_share(episodes), "no_success_groups": no_success,
            "all_success_groups": all_success, "path_to_success": path_share(episodes),
            "at_trajectory_level": same, "reads_state": {arm.name: reads_state(arm) for arm in arms}}


def _steps(share: float) -> str:
    """``every step`` or ``at least 97% of steps`` (a minimum over arms)."""
    return "every step" if share >= 1 - 1e-9 else f"at least {int(100 * share)}% of steps"


def unmixed_cause(cov: dict) -> str | None:
    """Why most groups do not mix success and failure, when one outcome is what they hold: the policy never or
    always succeeds (None: the groups mix, or are split between the two outcomes)."""
    if cov["mixed_groups"] >= 0.5:
        return None
    none, every = cov.get("no_success_groups"), cov.get("all_success_groups")
    bound = ""
    if none is None or every is None:  # a record from before these were kept: bounds from the success rate
        success = cov.get("success")
        if success is None:
            return None
        mixed = cov["mixed_groups"]  # a mixed group holds at most its share of the successes, at least none
        none, every, bound = max(0.0, 1 - success - mixed), max(0.0, success - mixed), "at least "
    if none >= 0.5:
        bound = "" if none >= 1 else bound
        return (f"no rollout succeeded in {bound}{int(100 * none)}% of groups: the policy is too weak for these "
                "tasks; lower ε (more expert actions), make the tasks easier or the groups larger")
    if every >= 0.5:
        bound = "" if every >= 1 else bound
        return (f"every rollout succeeded in {bound}{int(100 * every)}% of groups: the tasks are too easy for the "
                "policy; raise ε or make the tasks harder")
    return None


def reading(cov: dict, threshold: float = 0.9) -> str:
    """One line: which estimators equal their trajectory-level value on most steps, the likely cause, and what to
    do. Where groups do not mix outcomes (no success, or all success) that is the cause, whatever ``state_key``
    does; ``state_key`` is named only where few steps share a state."""
    same = cov["at_trajectory_level"]
    stepwise = {a: v for a, v in same.items() if cov["reads_state"][a]}  # arms with step-level credit
    flat = sorted(a for a, v in stepwise.items() if v >= threshold)
    mixed, shared = cov["mixed_groups"], cov["shared"]
    cause = unmixed_cause(cov)
    parts = []
    if cause is not None:
        parts.append(cause)
        if flat:
            parts.append(f"so {' and '.join(flat)} give the trajectory-level value on "
                         f"{_steps(min(stepwise[a] for a in flat))} ({100 * shared:.0f}% of steps share a state)")
    elif flat:
        share = min(stepwise[a] for a in flat)
        if shared < 0.5:
            parts.append(f"{' and '.join(flat)} give the trajectory-level value on {_steps(share)} here (only "
                         f"{100 * shared:.0f}% of steps share a state with another rollout): give state_key a coarser "
                         "function")
        else:
            path = cov.get("path_to_success")
            parts.append(f"{' and '.join(flat)} give the trajectory-level value on {_steps(share)} although "
                         f"{100 * shared:.0f}% of steps share a state" + (
                             f" ({100 * path:.0f}% have a path to success)" if path is not None else "")
                         + ": their step-level part does little in this env")
    if not flat and stepwise:
        lo, hi = min(stepwise.values()), max(stepwise.values())
        parts.append(f"step-level credit acts here: {', '.join(sorted(stepwise))} differ from the trajectory-level "
                     f"value on {100 * (1 - hi):.0f}-{100 * (1 - lo):.0f}% of steps "
                     f"({100 * shared:.0f}% of steps share a state)")
    if not stepwise:
        parts.append("no registered estimator reads state_key: every step gets its trajectory's value")
    if mixed < 0.5 and cause is None:
        parts.append(f"only {100 * mixed:.0f}% of groups mix success and failure, so outcome-only credit is 0 in "
                     "the rest: make tasks easier, groups larger or the policy more varied")
    return "; ".join(parts) + "."
