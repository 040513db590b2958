"""Preference-data collection (RRO Algorithm 1 run along whole trajectories, §3.2 + §4.3).

For each task: the episode starts (a zero-turn branch of the engine: reset), r_0 = ProcessReward(e_1:0)
(Alg. 1 line 13 at t = 1), then at every step t

1. candidates â_t ~ π(·|e_1:t−1) are one-turn branches of the rollout engine from the state e_1:t−1
   (``engine.branch``: the prompt the engine shows there, restored by snapshot or verified replay);
   each is a one-step :class:`Trajectory` that knows o_t, whether the episode ended, and the env
   snapshot for the MC rollouts;
2. their process rewards come from :class:`~creditflow.pairs.mc.MCProcessReward` (m rollouts each
   through the batched engine; cached by (task, action path));
3. :func:`~creditflow.pairs.rro.rising_sampler` (RRO) or :func:`fixed_size_sampler` (§4.2) decides
   how many candidates to sample and which pair (if any) enters the data;
4. the trajectory continues with the chosen (highest-reward) candidate; r_{t−1} := its reward.

Each task yields its preference pairs, its accounting record and the explored trajectory itself.
Candidates that are invalid actions count as samples. By default (the paper) they get their MC process
reward like any other; the env treats them as no-ops, so that is the current state's value again. With
``invalid_action_reward`` set, an invalid candidate gets that value instead, with no MC rollouts. If such a
candidate is still the one chosen (every candidate was invalid), the state did not change, so r_{t−1} stays.
Determinism: the torch RNG is seeded per task from (run seed, task seed) before the task's
first generation, so a task's data does not depend on which tasks ran before it (resume) nor on the env
executor (generation stays in this process).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from creditflow.envs.base import ReplayMismatch
from creditflow.pairs.mc import MCProcessReward, PrefixRestoreError
from creditflow.pairs.preferences import PreferenceWriter, preference_record
from creditflow.pairs.rro import NO_RISING, StepSampling, sample_step
from creditflow.rollout.engine import RolloutEngine
from creditflow.rollout.trajectory import StartState, Trajectory


def task_seed(run_seed: int, seed: int) -> int:
    """The torch seed of one task's collection (independent of the tasks before it)."""
    return (int(run_seed) * 1_000_003 + int(seed) * 7_919 + 12_345) % (2**63 - 1)


class PreferenceCollector:
    """Runs the exploration of one task at a time; see the module docstring.

    ``engine`` generates candidates (its backend, prompt builder and ``sampling``) and runs the MC
    rollouts; every env interaction goes through its public ``branch`` / ``rollout``.
    """

    def __init__(self, engine: RolloutEngine, *, exploration: str = "rising", candidates: int = 5,
                 mc_rollouts: int = 5, seed: int = 0, sampling=None, env_name: str = "env",
                 invalid_action_reward: float | None = None):
        if exploration not in ("rising", "fixed"):
            raise ValueError(f"unknown exploration {exploration!r}; use rising or fixed")
        self.engine = engine
        self.exploration = exploration
        self.candidates = int(candidates)
        self.sampling = sampling or engine.sampling
        self.mc = MCProcessReward(engine, mc_rollouts, sampling=self.sampling)
        self.seed = seed
        self.env_name = env_name
        self.invalid_action_reward = invalid_action_reward

    # -- one task ----------------------------------------------------------------------------------
    def collect_task(self, seed: int, task_id: str | None = None) -> tuple[list[dict], dict, Trajectory | None]:
        """Explore one task; returns its preference pairs, its accounting record and the explored
        trajectory (``None`` when a state could not be restored)."""
        task_id = task_id or f"{self.env_name}/{seed}"
        t0 = time.perf_counter()
        torch.manual_seed(task_seed(self.seed, seed))
        self.mc.clear()
        self.mc.stats.reset()
        record = {"task_id": task_id, "seed": seed, "exploration": self.exploration, "steps": 0, "samples": 0,
                  "pairs": 0, "omitted_no_rising": 0, "omitted_no_contrast": 0, "candidate_tokens": 0,
                  "invalid_candidates": 0,
                  "step_samples": [], "step_rewards": []}
        pairs: list[dict] = []
        path: Trajectory | None = None
        try:
            path = self._run(task_id, seed, pairs, record)
        except (PrefixRestoreError, ReplayMismatch) as exc:
            record["failed"] = str(exc)
            pairs = []
            record["pairs"] = 0
        mc = self.mc.stats
        record.update(rollouts=mc.rollouts, mc_queries=mc.queries, mc_cache_hits=mc.cache_hits,
                      terminal_prefixes=mc.terminal, rollout_tokens=mc.generated_tokens,
                      env_steps=mc.env_steps + record["samples"], seconds=round(time.perf_counter() - t0, 3))
        return pairs, record, path

    def _branch(self, state: StartState, n: int, task_id: str, turns: int) -> list[Trajectory]:
        out = self.engine.branch(state, n, task_id=task_id, max_turns=turns, sampling=self.sampling)
        if len(out) != n:  # the engine could not restore the state (verified replay diverged)
            raise PrefixRestoreError(f"could not restore the {state.t}-action state of {task_id}")
        return out

    def _run(self, task_id: str, seed: int, pairs: list[dict], record: dict) -> Trajectory:
        (path,) = self._branch(StartState(seed), 1, task_id, 0)  # reset: the empty path e_1:0
        (r_prev,) = self.mc.estimate(task_id, [path.prefix()])  # Alg. 1 line 13: r_PRM of e_1:0 = [u]
        record["initial_reward"] = r_prev
        while True:
            messages = self.engine.prompt_at(path)
            state = path.prefix()

            def propose(n: int) -> list[Trajectory]:  # Alg. 1 line 16: â_t ~ π(·|e_1:t−1)
                cands = self._branch(state, n, task_id, 1)
                record["candidate_tokens"] += sum(len(c.steps[0].response_ids or []) for c in cands)
                record["invalid_candidates"] += sum(not c.steps[0].valid for c in cands)
                return cands

            def estimate(cands: list[Trajectory]) -> list[float]:  # Alg. 1 line 18
                todo = [c for c in cands if self._estimated(c)]  # the others get invalid_action_reward
                mc = iter(self.mc.estimate(task_id, [c.prefix() for c in todo],
                                           [c.score if c.done else None for c in todo]) if todo else [])
                return [next(mc) if self._estimated(c) else float(self.invalid_action_reward) for c in cands]

            step: StepSampling[Trajectory] = sample_step(self.exploration, propose, estimate, r_prev,
                                                         self.candidates)
            record["steps"] += 1
            record["samples"] += step.samples
            record["step_samples"].append(step.samples)
            record["step_rewards"].append(list(step.rewards))
            if step.keep:
                best, worst = step.chosen_candidate.steps[0], step.rejected_candidate.steps[0]
                pairs.append(preference_record(
                    messages, best.response, worst.response, task_id=task_id, seed=seed, step=len(path) + 1,
                    chosen_reward=step.rewards[step.chosen], rejected_reward=step.rewards[step.rejected],
                    previous_reward=r_prev, candidates=step.samples, chosen_action=best.action,
                    rejected_action=worst.action, chosen_valid=best.valid, rejected_valid=worst.valid,
                    exploration=self.exploration))
                record["pairs"] += 1
            elif step.omitted == NO_RISING:
                record["omitted_no_rising"] += 1
            else:
                record["omitted_no_contrast"] += 1
            chosen = step.chosen_candidate  # the trajectory continues with the chosen action
            path.steps.append(chosen.steps[0])
            path.end_snapshot, path.end_info, path.final_state = chosen.end_snapshot, chosen.end_info, chosen.final_state
            path.meta["final_observation"] = chosen.meta["final_observation"]
            if self._estimated(chosen):  # else: an invalid no-op with the set reward; the state, and r_{t-1}, stay
                r_prev = step.rewards[step.chosen]  # r_{t-1} of the next step = r_PRM(e_1:t)
            if chosen.done:
                path.success, path.score = chosen.success, chosen.score
                record.update(length=len(path), success=path.success, score=path.score)
                return path

    def _estimated(self, candidate: Trajectory) -> bool:
        """Whether ``candidate``'s process reward is its MC estimate (false: an invalid action with the set
        ``invalid_action_reward``)."""
        return self.invalid_action_reward is None or candidate.steps[0].valid

    # -- many tasks --------------------------------------------------------------------------------
    def collect(self, seeds: list[int], writer: PreferenceWriter,
                progress: Callable[[int, int, dict], None] | None = None) -> dict:
        """Collect every seed not yet finished in ``writer``; returns the summary."""
        todo = [s for s in seeds if not writer.done(f"{self.env_name}/{s}")]
        done0 = len(seeds) - len(todo)
        for i, seed in enumerate(todo):
            pairs, record, path = self.collect_task(seed)
            trajectory = None
            if path is not None:  # the explored trajectory, with each step's candidate process rewards
                path.meta.update(exploration=self.exploration, step_rewards=record["step_rewards"])
                trajectory = path.to_dict()
            writer.add_task(pairs, record, trajectory)
            if progress is not None:
                progress(done0 + i + 1, len(seeds), record)
        return writer.write_summary()
