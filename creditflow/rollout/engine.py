"""The rollout engine: B tasks x G rollouts in lockstep, one batched ``generate`` per turn.

Every turn the engine builds the prompt of every still-running episode, generates all responses in one
batched call, parses the actions, steps the envs, and records per step: prompt ids, response ids,
behaviour log-probs, observation, state_key, action, response text, valid, reward, done. Finished
episodes drop out of the batch. Episodes can start from an intermediate state (CRPS replay, RRO
process rewards): by the env's snapshot/restore where it has one, else by verified prefix replay; the
prompt's history window is rebuilt from the stored prefix so the policy sees what it would have seen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from creditflow.envs.base import INVALID_ACTION_PREFIX, ReplayMismatch, has_snapshot, replay
from creditflow.policy.backends.base import Backend, SamplingParams
from creditflow.policy.parsing import parse_action
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.trajectory import Step, Trajectory

KEEP_INFO = ("score", "won", "boxes_on_target")


@dataclass
class TaskSpec:
    """One task instance to roll out: env seed plus an optional start state.

    ``prefix_actions`` / ``prefix_observations`` (observations[0] = after reset) describe the path to the
    start state; ``snapshot`` restores it directly when the env supports it.
    """

    task_id: str
    seed: int
    group_id: str = ""
    prefix_actions: list[str] = field(default_factory=list)
    prefix_observations: list[str] | None = None
    snapshot: object | None = None
    meta: dict = field(default_factory=dict)


@dataclass
class _Episode:
    spec: TaskSpec
    index: int
    env: object
    observation: str
    info: dict
    history: list[tuple[str, str]]
    traj: Trajectory
    done: bool = False


@dataclass
class RolloutStats:
    env_steps: int = 0
    generated_tokens: int = 0
    generate_calls: int = 0
    restore_mismatches: int = 0
    seconds: float = 0.0
    generate_seconds: float = 0.0


class RolloutEngine:
    """Runs episodes of ``env_factory()`` envs with a generation ``backend``.

    ``encode(messages) -> list[int]`` turns chat messages into prompt ids (the tokenizer's chat template
    with the generation prompt).
    """

    def __init__(self, backend: Backend, encode: Callable[[list[dict]], list[int]],
                 env_factory: Callable[[], object], prompt_builder: PromptBuilder,
                 sampling: SamplingParams, invalid_penalty: float = 0.1, max_steps: int | None = None):
        self.backend = backend
        self.encode = encode
        self.env_factory = env_factory
        self.prompts = prompt_builder
        self.sampling = sampling
        self.invalid_penalty = invalid_penalty
        self.max_steps = max_steps
        self._pool: list[object] = []
        self.stats = RolloutStats()

    def _env(self, i: int):
        while len(self._pool) <= i:
            self._pool.append(self.env_factory())
        return self._pool[i]

    # -- starting episodes ----------------------------------------------------------------------
    def _start(self, spec: TaskSpec, index: int, k: int) -> _Episode | None:
        env = self._env(index)
        prefix = spec.prefix_actions
        try:
            if prefix and spec.snapshot is not None and has_snapshot(env):
                env.reset(seed=spec.seed)
                obs, info = env.restore(spec.snapshot)
            elif prefix:
                res = replay(env, spec.seed, prefix, spec.prefix_observations)
                if res.done:
                    raise ReplayMismatch(len(prefix), "<episode continues>", "<episode ended>")
                obs, info = res.observation, res.info
            else:
                obs, info = env.reset(seed=spec.seed)
        except ReplayMismatch:
            self.stats.restore_mismatches += 1
            return None
        if prefix:
            shown = spec.prefix_observations or []
            # the policy saw its parsed action, the env got INVALID_ACTION_PREFIX + it for invalid ones
            history = [(shown[i] if i < len(shown) else "", a.removeprefix(INVALID_ACTION_PREFIX))
                       for i, a in enumerate(prefix)]
        else:
            history = []
        traj = Trajectory(
            task_id=spec.task_id,
            group_id=spec.group_id or spec.task_id,
            traj_id=f"{spec.group_id or spec.task_id}/{k}",
            meta={"seed": spec.seed, "start_step": len(prefix), **spec.meta},
        )
        return _Episode(spec, index, env, obs, info, history, traj)

    # -- main loop ------------------------------------------------------------------------------
    def rollout(self, specs: list[TaskSpec], group_size: int = 1, sampling: SamplingParams | None = None,
                on_turn: Callable[[int, int], None] | None = None) -> list[Trajectory]:
        """Roll out ``group_size`` episodes of every spec; returns the trajectories, spec-major order.

        Specs whose start state cannot be restored (replay mismatch) yield no trajectories; the count is
        in ``stats.restore_mismatches``.
        """
        sampling = sampling or self.sampling
        t0 = time.perf_counter()
        episodes: list[_Episode] = []
        for s, spec in enumerate(specs):
            for k in range(group_size):
                ep = self._start(spec, len(episodes), k)
                if ep is not None:
                    episodes.append(ep)
        turn = 0
        while True:
            active = [ep for ep in episodes if not ep.done]
            if not active:
                break
            if on_turn is not None:
                on_turn(turn, len(active))
            prompt_ids = [self.encode(self._messages(ep)) for ep in active]
            g0 = time.perf_counter()
            outs = self.backend.generate(prompt_ids, sampling)
            self.stats.generate_seconds += time.perf_counter() - g0
            self.stats.generate_calls += 1
            for ep, ids, out in zip(active, prompt_ids, outs):
                self._advance(ep, ids, out)
            turn += 1
        self.stats.seconds += time.perf_counter() - t0
        return [ep.traj for ep in episodes]

    def _messages(self, ep: _Episode) -> list[dict]:
        return self.prompts.messages(ep.info.get("task", ""), ep.observation, ep.history,
                                     ep.info.get("admissible_actions"))

    def _advance(self, ep: _Episode, prompt_ids: list[int], out) -> None:
        admissible = ep.info.get("admissible_actions")
        parsed = parse_action(out.text, admissible)
        state = ep.info.get("state_key", "")
        obs, reward, terminated, truncated, info = ep.env.step(parsed.action if parsed.valid else
                                                                _invalid_action(parsed.action))
        valid = parsed.valid and bool(info.get("action_valid", True))
        if not parsed.valid:
            reward -= self.invalid_penalty  # unparseable / non-admissible: no move, penalty
        step_count = len(ep.traj.steps) + 1 + ep.traj.meta.get("start_step", 0)
        if self.max_steps is not None and step_count >= self.max_steps and not terminated:
            truncated = True
        done = terminated or truncated
        ep.traj.steps.append(Step(
            state=state,
            observation=ep.observation,
            action=parsed.action,
            response=out.text,
            valid=valid,
            reward=float(reward),
            done=done,
            next_state=info.get("state_key", ""),
            info={k: info[k] for k in KEEP_INFO if k in info},
            prompt_ids=prompt_ids,
            response_ids=list(out.token_ids),
            logprobs=list(out.logprobs),
        ))
        self.stats.env_steps += 1
        self.stats.generated_tokens += len(out.token_ids)
        ep.history.append((ep.observation, parsed.action))
        ep.observation, ep.info = obs, info
        if done:
            ep.done = True
            ep.traj.final_state = info.get("state_key", "")
            ep.traj.meta["final_observation"] = obs
            ep.traj.success = bool(info.get("won", False))
            ep.traj.score = float(info.get("score", 1.0 if ep.traj.success else 0.0))


def _invalid_action(text: str) -> str:
    """What the env receives for an unparseable/non-admissible response (envs never execute it)."""
    return INVALID_ACTION_PREFIX + text
