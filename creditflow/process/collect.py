"""Preference-data collection (RRO Algorithm 1 run along whole trajectories, §3.2 + §4.3).

For each task: r_0 = ProcessReward(e_1:0) (Alg. 1 line 13 at t = 1), then at every step t

1. candidates â_t ~ π(·|e_1:t−1) are sampled from the prompt the rollout engine would show at e_1:t−1
   (same PromptBuilder, history window and chat encoding) and applied to a local copy of the env
   (snapshot/restore, else verified replay of e_1:t−1) to get o_t, whether the episode ended and an
   env snapshot for the MC rollouts;
2. their process rewards come from :class:`~creditflow.process.mc.MCProcessReward` (m rollouts each
   through the batched engine; cached by (task, action prefix));
3. :func:`~creditflow.process.rro.rising_sampler` (RRO) or :func:`fixed_size_sampler` (§4.2) decides
   how many candidates to sample and which pair (if any) enters the data;
4. the trajectory continues with the chosen (highest-reward) candidate; r_{t−1} := its reward.

Candidates that are invalid actions count as samples and get their process reward (the env treats them
as no-ops). Determinism: the torch RNG is seeded per task from (run seed, task seed) before the task's
first generation, so a task's data does not depend on which tasks ran before it (resume) nor on the env
executor (generation stays in this process).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from creditflow.envs.base import ReplayMismatch, has_snapshot
from creditflow.policy.parsing import parse_action
from creditflow.process.mc import MCProcessReward, Prefix, PrefixRestoreError
from creditflow.process.preferences import PreferenceWriter, preference_record
from creditflow.process.rro import NO_RISING, StepSampling, sample_step
from creditflow.rollout.engine import env_action
from creditflow.rollout.executors import start_env


@dataclass
class Candidate:
    """One sampled next action and what it does to the env."""

    response: str
    token_ids: list[int]
    action: str  # parsed action (what the prompt history shows)
    executed: str  # what the env received (invalid actions carry INVALID_ACTION_PREFIX)
    valid: bool
    observation: str  # o_t, after the action
    info: dict
    done: bool
    prefix: Prefix  # e_1:t−1 ⊕ â_t, for the MC estimator


def task_seed(run_seed: int, seed: int) -> int:
    """The torch seed of one task's collection (independent of the tasks before it)."""
    return (int(run_seed) * 1_000_003 + int(seed) * 7_919 + 12_345) % (2**63 - 1)


class PreferenceCollector:
    """Runs the exploration of one task at a time; see the module docstring.

    ``engine`` generates candidates (its backend, prompt builder, encoder and ``sampling``) and runs the
    MC rollouts; ``env_factory`` makes the local env candidates are applied to.
    """

    def __init__(self, engine, env_factory: Callable[[], object], *, exploration: str = "rising",
                 candidates: int = 5, mc_rollouts: int = 5, seed: int = 0, sampling=None, env_name: str = "env"):
        if exploration not in ("rising", "fixed"):
            raise ValueError(f"unknown exploration {exploration!r}; use rising or fixed")
        self.engine = engine
        self.env = env_factory()
        self.exploration = exploration
        self.candidates = int(candidates)
        self.sampling = sampling or engine.sampling
        self.mc = MCProcessReward(engine, mc_rollouts, sampling=self.sampling)
        self.seed = seed
        self.env_name = env_name

    # -- the local env ---------------------------------------------------------------------------
    def _apply(self, task_id: str, seed: int, actions: list[str], observations: list[str], snapshot,
               obs: str, info: dict, gen) -> Candidate:
        """Apply one sampled response at e_1:t−1 (restored by snapshot or verified replay) on the local env."""
        parsed = parse_action(gen.text, info.get("admissible_actions"))
        executed = env_action(parsed)
        start_env(self.env, seed, actions, observations, snapshot)
        nobs, _, terminated, truncated, ninfo = self.env.step(executed)
        t = len(actions) + 1
        if self.engine.max_steps is not None and t >= self.engine.max_steps:  # the engine's episode cap
            truncated = True
        done = terminated or truncated
        won = bool(ninfo.get("won", False))
        score = float(ninfo.get("score", 1.0 if won else 0.0))
        snap = self.env.snapshot() if has_snapshot(self.env) and not done else None
        prefix = Prefix(task_id, seed, actions + [executed], observations + [obs], snapshot=snap,
                        outcome=score if done else None)
        return Candidate(gen.text, list(gen.token_ids), parsed.action, executed,
                         parsed.valid and bool(ninfo.get("action_valid", True)), nobs, ninfo, done, prefix)

    # -- one task ----------------------------------------------------------------------------------
    def collect_task(self, seed: int, task_id: str | None = None) -> tuple[list[dict], dict]:
        """Explore one task; returns its preference pairs and its accounting record."""
        import torch

        task_id = task_id or f"{self.env_name}/{seed}"
        t0 = time.perf_counter()
        torch.manual_seed(task_seed(self.seed, seed))
        self.mc.clear()
        self.mc.stats.reset()
        record = {"task_id": task_id, "seed": seed, "exploration": self.exploration, "steps": 0, "samples": 0,
                  "pairs": 0, "omitted_no_rising": 0, "omitted_no_contrast": 0, "candidate_tokens": 0,
                  "step_samples": [], "step_rewards": []}
        pairs: list[dict] = []
        try:
            self._run(task_id, seed, pairs, record)
        except (PrefixRestoreError, ReplayMismatch) as exc:
            record["failed"] = str(exc)
            pairs = []
            record["pairs"] = 0
        mc = self.mc.stats
        record.update(rollouts=mc.rollouts, mc_queries=mc.queries, mc_cache_hits=mc.cache_hits,
                      terminal_prefixes=mc.terminal, rollout_tokens=mc.generated_tokens,
                      env_steps=mc.env_steps + record["samples"], seconds=round(time.perf_counter() - t0, 3))
        return pairs, record

    def _run(self, task_id: str, seed: int, pairs: list[dict], record: dict) -> None:
        eng = self.engine
        obs, info = self.env.reset(seed=seed)
        actions: list[str] = []
        observations: list[str] = []
        history: list[tuple[str, str]] = []
        snapshot = self.env.snapshot() if has_snapshot(self.env) else None
        (r_prev,) = self.mc.estimate([Prefix(task_id, seed)])  # Alg. 1 line 13: r_PRM of e_1:0 = [u]
        record["initial_reward"] = r_prev
        while True:
            messages = eng.prompts.messages(info.get("task", ""), obs, history, info.get("admissible_actions"))
            prompt_ids = eng.encode(messages)
            state = (list(actions), list(observations), snapshot, obs, info)

            def propose(n: int) -> list[Candidate]:  # Alg. 1 line 16: â_t ~ π(·|e_1:t−1)
                gens = eng.backend.generate([prompt_ids] * n, self.sampling)
                record["candidate_tokens"] += sum(len(g.token_ids) for g in gens)
                return [self._apply(task_id, seed, *state, g) for g in gens]

            def estimate(cands: list[Candidate]) -> list[float]:  # Alg. 1 line 18
                return self.mc.estimate([c.prefix for c in cands])

            step: StepSampling[Candidate] = sample_step(self.exploration, propose, estimate, r_prev,
                                                        self.candidates)
            record["steps"] += 1
            record["samples"] += step.samples
            record["step_samples"].append(step.samples)
            record["step_rewards"].append(list(step.rewards))
            if step.keep:
                best, worst = step.chosen_candidate, step.rejected_candidate
                pairs.append(preference_record(
                    messages, best.response, worst.response, task_id=task_id, seed=seed, step=len(actions) + 1,
                    chosen_reward=step.rewards[step.chosen], rejected_reward=step.rewards[step.rejected],
                    previous_reward=r_prev, candidates=step.samples, chosen_action=best.action,
                    rejected_action=worst.action, exploration=self.exploration))
                record["pairs"] += 1
            elif step.omitted == NO_RISING:
                record["omitted_no_rising"] += 1
            else:
                record["omitted_no_contrast"] += 1
            chosen = step.chosen_candidate  # the trajectory continues with the chosen action
            actions.append(chosen.executed)
            observations.append(obs)
            history.append((obs, chosen.action))
            obs, info, snapshot = chosen.observation, chosen.info, chosen.prefix.snapshot
            r_prev = step.rewards[step.chosen]  # r_{t-1} of the next step = r_PRM(e_1:t)
            if chosen.done:
                won = bool(info.get("won", False))
                record.update(length=len(actions), success=won,
                              score=float(info.get("score", 1.0 if won else 0.0)))
                return

    # -- many tasks --------------------------------------------------------------------------------
    def collect(self, seeds: list[int], writer: PreferenceWriter,
                progress: Callable[[int, int, dict], None] | None = None) -> dict:
        """Collect every seed not yet finished in ``writer``; returns the summary."""
        todo = [s for s in seeds if not writer.done(f"{self.env_name}/{s}")]
        done0 = len(seeds) - len(todo)
        for i, seed in enumerate(todo):
            pairs, record = self.collect_task(seed)
            writer.add_task(pairs, record)
            if progress is not None:
                progress(done0 + i + 1, len(seeds), record)
        return writer.write_summary()
