"""The rollout engine: B tasks x G rollouts in lockstep, one batched ``generate`` per turn.

Every turn the engine builds the prompt of every still-running episode, generates all responses in one
batched call, parses the actions, steps the envs, and records per step: prompt ids, response ids,
behaviour log-probs, observation, state_key, action, response text, valid, reward, done. Finished
episodes drop out of the batch. The outcome (``success``, ``score``) is decided by the run's
:class:`SuccessRule`.

Episodes can start from an intermediate :class:`StartState` (CRPS replay, RRO candidates and process
rewards): by the env's snapshot/restore where it has one, else by verified replay; the prompt's history
window is rebuilt from the stored path so the policy sees what it would have seen. The public way to
start from a state is :meth:`RolloutEngine.branch`; ``max_turns`` stops episodes early (an RRO
candidate is a one-turn branch), and such an open trajectory keeps an env snapshot of where it stopped.
All env work (start, step, snapshot) goes through an env executor (``creditflow.rollout.executors``): in
this process by default, or on Ray; generation always stays here.

Multi-turn layouts (the prompt builder's ``history``, docs/formats.md "Multi-turn layouts"):

* ``window``: every turn encodes a fresh prompt (the last H observation/action pairs).
* ``conversation``: an episode's prompt is one growing token sequence. After each turn the engine appends
  to that turn's prompt ids the *sampled* ids and then the ids of the next user turn
  (:meth:`ChatTemplate.continuation`), so turn t's prompt is a prefix of turn t+1's and the text is never
  re-tokenized. The backend's prefix cache (when it has one) then feeds only the new tokens. An episode
  that starts mid-task rebuilds its conversation from the path: each earlier step as the user turn of the
  stored observation (admissible actions from a verified replay in the engine's own env) and the
  assistant turn ``format_response(action)``; that is the live conversation token for token wherever the
  policy answered in that canonical form, and :meth:`prompt_at` gives the same chat.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable

from creditflow.envs.base import INVALID_ACTION_PREFIX, ReplayMismatch
from creditflow.policy.backends.base import Backend, SamplingParams
from creditflow.policy.parsing import ParsedAction, parse_response
from creditflow.policy.prompts import ChatTemplate, PromptBuilder, Turn, format_response
from creditflow.rollout.executors import EnvExecutor, InProcessEnvExecutor
from creditflow.rollout.trajectory import StartState, Step, SuccessRule, Trajectory

KEEP_INFO = ("score", "won", "boxes_on_target")


@dataclass
class TaskSpec:
    """One task instance to roll out: env seed ``seed``, from its initial state or from ``start``.

    ``start`` (a :class:`StartState` of the same seed) is an intermediate state; its actions are those
    the env received (an unparseable response is ``INVALID_ACTION_PREFIX + text`` there, and the prompt
    history shows it as ``text``, as the live episode did).
    """

    task_id: str
    seed: int
    group_id: str = ""
    start: StartState | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.start is not None and self.start.seed != self.seed:
            raise ValueError(f"TaskSpec {self.task_id}: start state of seed {self.start.seed}, task seed {self.seed}")

    @property
    def start_state(self) -> StartState:
        return self.start if self.start is not None else StartState(self.seed)


@dataclass
class _Episode:
    spec: TaskSpec
    index: int  # the env executor's slot
    observation: str
    info: dict
    history: list[tuple[str, str]]
    traj: Trajectory
    done: bool = False
    context: list[int] | None = None  # conversation layout: the ids of the next prompt


@dataclass
class RolloutResult:
    """What :meth:`RolloutEngine.rollout_groups` returns: the trajectories (spec-major) and, explicitly, the
    groups (``group_id``, else ``task_id``, of a spec) with an episode whose start state could not be restored
    (verified replay mismatch): such a group came back short or empty."""

    trajectories: list[Trajectory]
    unrestored: list[str] = field(default_factory=list)


@dataclass
class RolloutStats:
    env_steps: int = 0
    generated_tokens: int = 0
    generate_calls: int = 0
    restore_mismatches: int = 0
    seconds: float = 0.0
    generate_seconds: float = 0.0


@dataclass(frozen=True)
class EpisodeRules:
    """How the engine scores and ends an episode: ``invalid_penalty`` off the reward of an action that does not
    parse or is not admissible (``rollout.invalid_penalty``), the turn limit ``max_steps`` (None: the env's own),
    and the run's one ``success_rule``."""

    invalid_penalty: float = 0.1
    max_steps: int | None = None
    success_rule: SuccessRule = SuccessRule()


class RolloutEngine:
    """Runs episodes of ``env_factory()`` envs with a generation ``backend``.

    ``encode(messages) -> list[int]`` turns chat messages into prompt ids (the tokenizer's chat template
    with the generation prompt). ``rules``: the penalty, turn limit and success rule (:class:`EpisodeRules`).
    ``env_executor`` runs the env work (default: in this process). ``chat`` (the tokenizer's
    :class:`ChatTemplate`) continues conversations; the conversation layout needs it.
    """

    def __init__(self, backend: Backend, encode: Callable[[list[dict]], list[int]],
                 env_factory: Callable[[], object], prompt_builder: PromptBuilder,
                 sampling: SamplingParams, rules: EpisodeRules = EpisodeRules(),
                 env_executor: EnvExecutor | None = None, chat: ChatTemplate | None = None):
        if prompt_builder.conversation and chat is None:
            raise ValueError("the conversation layout needs the tokenizer's ChatTemplate (chat=...)")
        self.backend = backend
        self.chat = chat
        self.success_rule = rules.success_rule
        self.encode = encode
        self.env_factory = env_factory
        self.prompts = prompt_builder
        self.sampling = sampling
        self.invalid_penalty = rules.invalid_penalty
        self.max_steps = rules.max_steps
        self.executor: EnvExecutor = env_executor or InProcessEnvExecutor(env_factory)
        self.stats = RolloutStats()
        self._env = None  # the engine's own env: verified replays that rebuild restored conversations

    # -- starting episodes ----------------------------------------------------------------------
    def _start(self, spec: TaskSpec, index: int, k: int, obs: str, info: dict,
               context: list[int] | None = None) -> _Episode:
        state = spec.start_state
        shown = state.observations
        # the policy saw its parsed action; the env got INVALID_ACTION_PREFIX + it for invalid ones
        history = [(shown[i] if i < len(shown) else "", shown_action(a)) for i, a in enumerate(state.actions)]
        traj = Trajectory(
            task_id=spec.task_id,
            group_id=spec.group_id or spec.task_id,
            traj_id=f"{spec.group_id or spec.task_id}/{k}",
            meta={"seed": spec.seed, "start_step": state.t, **spec.meta},
            start=state,
        )
        return _Episode(spec, index, obs, info, history, traj, context=context)

    def _conversation_start(self, state: StartState, obs: str, info: dict) -> list[int] | None:
        """The prompt ids of a conversation at ``state`` (its path rebuilt, see the module docstring);
        None when the replay of the path diverges from its stored observations."""
        try:
            turns = self._path_turns(state)
        except ReplayMismatch:
            return None
        return self.encode(self.prompts.chat(info.get("task", ""), turns, obs, info.get("admissible_actions")))

    def _path_turns(self, state: StartState) -> list[Turn]:
        """The steps of ``state``'s path as conversation turns, from a verified replay in the engine's own
        env (for the admissible actions each step showed); raises ``ReplayMismatch`` on a divergence."""
        if not state.actions:
            return []
        if self._env is None:
            self._env = self.env_factory()
        obs, info = self._env.reset(seed=state.seed)
        turns = []
        for i, executed in enumerate(state.actions):
            if i < len(state.observations) and obs != state.observations[i]:
                raise ReplayMismatch(i, state.observations[i], obs)
            action = shown_action(executed)
            turns.append(Turn(obs, info.get("admissible_actions"), action, format_response(action)))
            obs, _, _, _, info = self._env.step(executed)
        return turns

    # -- public entry points --------------------------------------------------------------------
    def branch(self, state: StartState, n: int, *, task_id: str, group_id: str = "",
               max_turns: int | None = None, sampling: SamplingParams | None = None,
               meta: dict | None = None) -> list[Trajectory]:
        """``n`` episodes from ``state`` (to their end, or for ``max_turns`` turns).

        Returns ``[]`` when the state cannot be restored (verified replay mismatch). An episode stopped by
        ``max_turns`` before its end keeps ``end_snapshot`` (the env's snapshot where it stopped) so the
        next branch from ``traj.prefix()`` restores without replay.
        """
        spec = TaskSpec(task_id, state.seed, group_id, start=state, meta=dict(meta or {}))
        return self.rollout([spec], n, sampling=sampling, max_turns=max_turns)

    def act(self, states: list[tuple[str, str, list[tuple[str, str]], list[str] | None]],
            sampling: SamplingParams | None = None) -> list[ParsedAction]:
        """One turn for many states at once, with no env work: each state ``(task, observation, history,
        admissible_actions)`` (``history`` the (observation, action) pairs before it, oldest first, as an episode's
        prompt window shows them) gets its prompt, all are generated in one batched call at ``sampling`` (default
        the engine's) and parsed as :meth:`rollout` parses them. The credit audit's LM behaviour policy acts
        through this (``creditflow.recipes.audit.ModelPolicy``); the window layout only (a conversation's prompt
        holds the sampled tokens of every earlier turn, which a state does not keep)."""
        if self.prompts.conversation:
            raise ValueError("RolloutEngine.act builds window prompts; the conversation layout needs the episode's "
                             "own token history (rollout.history=window)")
        if not states:
            return []
        prompt_ids = [self.encode(self.prompts.messages(task, obs, list(history), adm))
                      for task, obs, history, adm in states]
        g0 = time.perf_counter()
        outs = self.backend.generate(prompt_ids, sampling or self.sampling)
        self.stats.generate_seconds += time.perf_counter() - g0
        self.stats.generate_calls += 1
        self.stats.generated_tokens += sum(len(o.token_ids) for o in outs)
        return [parse_response(out.text, adm) for (_, _, _, adm), out in zip(states, outs)]

    def rollout(self, specs: list[TaskSpec], group_size: int = 1, sampling: SamplingParams | None = None,
                on_turn: Callable[[int, int], None] | None = None,
                max_turns: int | None = None) -> list[Trajectory]:
        """Roll out ``group_size`` episodes of every spec; returns the trajectories, spec-major order.

        Episodes whose start state cannot be restored (replay mismatch) yield no trajectories; the count is
        in ``stats.restore_mismatches`` and :meth:`rollout_groups` names their groups. ``max_turns`` stops
        every episode after that many turns.
        """
        return self.rollout_groups(specs, group_size, sampling=sampling, on_turn=on_turn,
                                   max_turns=max_turns).trajectories

    def rollout_groups(self, specs: list[TaskSpec], group_size: int = 1, sampling: SamplingParams | None = None,
                       on_turn: Callable[[int, int], None] | None = None,
                       max_turns: int | None = None) -> RolloutResult:
        """:meth:`rollout`, with the groups some of whose episodes could not be restored named in the result."""
        sampling = sampling or self.sampling
        t0 = time.perf_counter()
        slots = [(spec, k) for spec in specs for k in range(group_size)]
        started = self.executor.start([(i, spec.start_state) for i, (spec, _) in enumerate(slots)])
        episodes: list[_Episode] = []
        contexts: dict[int, list[int] | None] = {}  # conversation layout: one opening per spec
        unrestored: list[str] = []
        for i, ((spec, k), start) in enumerate(zip(slots, started)):
            context = None
            if start is not None and self.prompts.conversation:
                if id(spec) not in contexts:
                    contexts[id(spec)] = self._conversation_start(spec.start_state, *start)
                context = contexts[id(spec)]
                start = start if context is not None else None
            if start is None:  # verified replay mismatched
                self.stats.restore_mismatches += 1
                unrestored.append(spec.group_id or spec.task_id)
            else:
                episodes.append(self._start(spec, i, k, *start, context=context))
        reuse = getattr(self.backend, "prefix_cache", None) if self.prompts.conversation else None
        with reuse() if reuse is not None else nullcontext():
            self._turns(episodes, sampling, on_turn, max_turns)
        self.stats.seconds += time.perf_counter() - t0
        return RolloutResult([ep.traj for ep in episodes], list(dict.fromkeys(unrestored)))

    def _turns(self, episodes: list[_Episode], sampling: SamplingParams, on_turn, max_turns: int | None) -> None:
        """Run the lockstep turns until every episode is done (or ``max_turns``)."""
        turn = 0
        while True:
            active = [ep for ep in episodes if not ep.done]
            if not active:
                break
            if max_turns is not None and turn >= max_turns:  # stop open episodes where they are
                for ep, snap in zip(active, self.executor.snapshot([ep.index for ep in active])):
                    ep.traj.end_snapshot = snap
                    ep.traj.end_info = ep.info
                    ep.traj.meta["final_observation"] = ep.observation
                    ep.traj.final_state = ep.info.get("state_key", "")
                break
            if on_turn is not None:
                on_turn(turn, len(active))
            prompt_ids = [ep.context if ep.context is not None else self.encode(self._messages(ep)) for ep in active]
            g0 = time.perf_counter()
            outs = self.backend.generate(prompt_ids, sampling)
            self.stats.generate_seconds += time.perf_counter() - g0
            self.stats.generate_calls += 1
            parsed = [parse_response(out.text, ep.info.get("admissible_actions")) for ep, out in zip(active, outs)]
            results = self.executor.step([(ep.index, env_action(p)) for ep, p in zip(active, parsed)])
            results = self._cut(active, results)
            for ep, ids, out, p, res in zip(active, prompt_ids, outs, parsed, results):
                self._advance(ep, ids, out, p, res)
            turn += 1

    def _cut(self, active: list[_Episode], results: list) -> list:
        """The episodes this turn brings to ``max_steps`` that the env did not end are cut: truncated, and the env
        is told. Where it has ``truncate()``, the env ends its episode there as its own step limit would (a
        verifiers 0.3 env stops and scores the rollout, a TRL env calls ``get_reward``) and returns the extra
        reward of the last step and the info of the ended episode, which replace the step's; without it the
        episode is recorded as truncated with the step's own info."""
        if self.max_steps is None:
            return results
        cut = [i for i, (ep, res) in enumerate(zip(active, results))
               if not (res[2] or res[3]) and self._step_count(ep) >= self.max_steps]
        if not cut:
            return results
        results = list(results)
        for i, told in zip(cut, self.executor.truncate([active[i].index for i in cut])):
            obs, reward, terminated, _, info = results[i]
            if told is not None:
                extra, info = told
                reward = float(reward) + float(extra)
            results[i] = (obs, reward, terminated, True, info)
        return results

    @staticmethod
    def _step_count(ep: _Episode) -> int:
        """The env's steps in this episode after the one being recorded (its start path counts)."""
        return len(ep.traj.steps) + 1 + ep.traj.meta.get("start_step", 0)

    def _messages(self, ep: _Episode) -> list[dict]:
        return self.prompts.messages(ep.info.get("task", ""), ep.observation, ep.history,
                                     ep.info.get("admissible_actions"))

    def prompt_at(self, traj: Trajectory) -> list[dict]:
        """The chat messages the policy is shown after ``traj``'s last step (its path from reset, the
        observation and env info where it ended); ``traj`` must come from this engine (``end_info``).
        In the conversation layout it is the rebuilt conversation a branch from ``traj.prefix()`` starts
        from; a path whose replay diverges raises ``ReplayMismatch``."""
        state = traj.prefix()
        info = traj.end_info or {}
        observation = traj.meta.get("final_observation", "")
        if self.prompts.conversation:
            return self.prompts.chat(info.get("task", ""), self._path_turns(state), observation,
                                     info.get("admissible_actions"))
        shown = state.observations
        history = [(shown[i] if i < len(shown) else "", shown_action(a)) for i, a in enumerate(state.actions)]
        return self.prompts.messages(info.get("task", ""), observation, history, info.get("admissible_actions"))

    def _advance(self, ep: _Episode, prompt_ids: list[int], out, parsed: ParsedAction, result) -> None:
        """Record one step; ``result`` is what the env returned for ``env_action(parsed)``."""
        state = ep.info.get("state_key", "")
        obs, reward, terminated, truncated, info = result
        valid = parsed.valid and bool(info.get("action_valid", True))
        if not parsed.valid:
            reward -= self.invalid_penalty  # unparseable / non-admissible: no move, penalty
        step_count = self._step_count(ep)
        truncated = bool(truncated) and not terminated  # rollout.max_steps' cut is in it (_cut)
        done = bool(terminated) or truncated
        ep.traj.steps.append(Step(
            state=state,
            observation=ep.observation,
            action=parsed.action,
            response=out.text,
            valid=valid,
            reward=float(reward),
            done=done,
            truncated=truncated,
            next_state=info.get("state_key", ""),
            executed=None if valid else env_action(parsed),
            info={k: info[k] for k in KEEP_INFO if k in info},
            prompt_ids=prompt_ids,
            response_ids=list(out.token_ids),
            logprobs=list(out.logprobs),
        ))
        self.stats.env_steps += 1
        self.stats.generated_tokens += len(out.token_ids)
        ep.history.append((ep.observation, parsed.action))
        shown_actions = ep.info.get("admissible_actions")
        ep.observation, ep.info = obs, info
        if ep.context is not None and not done:  # the sampled ids, then the next user turn
            turn_text = self.prompts.next_turn(step_count + 1, obs, info.get("admissible_actions"), shown_actions)
            ep.context = prompt_ids + list(out.token_ids) + self.chat.continuation(list(out.token_ids), turn_text)
        if done:
            ep.done = True
            ep.traj.end_info = info
            ep.traj.final_state = info.get("state_key", "")
            ep.traj.meta["final_observation"] = obs
            ep.traj.success, ep.traj.score = self.success_rule.outcome(info)


def _invalid_action(text: str) -> str:
    """What the env receives for an unparseable/non-admissible response (envs never execute it)."""
    return INVALID_ACTION_PREFIX + text


def env_action(parsed: ParsedAction) -> str:
    """The action the env receives for a parsed response."""
    return parsed.action if parsed.valid else _invalid_action(parsed.action)


def shown_action(executed: str) -> str:
    """The action as the prompt history shows it (the parsed text, without the invalid marker)."""
    return executed[len(INVALID_ACTION_PREFIX):] if executed.startswith(INVALID_ACTION_PREFIX) else executed
