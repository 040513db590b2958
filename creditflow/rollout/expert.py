"""Scripted play: the env's expert (``env.expert_actions()``: Sokoban's BFS solver, TextWorld's walkthrough,
the SQL gold query) and the text corpus the tiny policy's tokenizer is trained on.

Both run one loop, :func:`play`, that applies a fixed action list from a seed's start and records the
episode as a :class:`Trajectory` whose steps keep the prompt inputs (task, admissible actions).
"""

from __future__ import annotations

import random
from typing import Callable

from creditflow.envs.adapters.trl_env import parse_tool_call
from creditflow.errors import UserError
from creditflow.policy.prompts import PromptBuilder, format_response, name_of_env
from creditflow.policy.tools import tool_call_message, tool_result_message
from creditflow.rollout.trajectory import Step, SuccessRule, Trajectory


def play(env, seed: int, actions: list[str], success_rule: SuccessRule = SuccessRule()) -> Trajectory:
    """Reset ``env`` to ``seed`` and apply ``actions`` until the episode ends; the recorded episode.

    Each step's ``info`` holds the ``task`` and ``admissible_actions`` shown before it (what a prompt of
    that step needs)."""
    obs, info = env.reset(seed=seed)
    traj = Trajectory(task_id=f"{name_of_env(env)}/{seed}", meta={"seed": seed})
    for action in actions:
        nobs, reward, terminated, truncated, nxt = env.step(action)
        traj.steps.append(Step(state=info.get("state_key", ""), observation=obs, action=action,
                               response=format_response(action), valid=bool(nxt.get("action_valid", True)),
                               reward=reward, done=terminated or truncated, next_state=nxt.get("state_key", ""),
                               info={"task": info.get("task", ""),
                                     "admissible_actions": info.get("admissible_actions")}))
        obs, info = nobs, nxt
        if terminated or truncated:
            break
    traj.final_state = info.get("state_key", "")
    traj.meta["final_observation"] = obs
    traj.success, traj.score = success_rule.outcome(info)
    return traj


def _expert_env(env_factory: Callable[[], object]):
    env = env_factory()
    if not callable(getattr(env, "expert_actions", None)):
        raise UserError(f"env {name_of_env(env)!r} has no expert (expert_actions) for demonstrations")
    return env


def planned_actions(env, seed: int) -> list[str]:
    """The expert's actions from ``seed``'s start."""
    env.reset(seed=seed)
    return list(env.expert_actions() or [])


def expert_trajectories(env_factory: Callable[[], object], seeds: list[int],
                        success_rule: SuccessRule = SuccessRule()) -> list[Trajectory]:
    """Run the env's expert from each seed's start; keep only successful episodes."""
    env = _expert_env(env_factory)
    out = []
    for seed in seeds:
        traj = play(env, seed, planned_actions(env, seed), success_rule)
        traj.meta["expert"] = True
        if traj.success:
            out.append(traj)
    return out


def expert_corpus(env_factory: Callable[[], object], prompts: PromptBuilder, seeds: list[int],
                  random_steps: int = 6, rng_seed: int = 0) -> list[str]:
    """Text the tiny tokenizer is trained on: prompts along expert and random episodes, plus responses.

    Each seed plays the expert's plan followed by ``random_steps`` admissible actions drawn at its start.
    """
    rng = random.Random(rng_seed)
    env = env_factory()
    texts = []
    for seed in seeds:
        _, info = env.reset(seed=seed)
        plan = env.expert_actions() if callable(getattr(env, "expert_actions", None)) else None
        actions = list(plan or [])
        adm = info.get("admissible_actions") or []
        actions += [rng.choice(adm) for _ in range(random_steps)] if adm else []
        history: list[tuple[str, str]] = []
        for step in play(env, seed, actions).steps:
            texts.append(prompts.text(step.info["task"], step.observation, history, step.info["admissible_actions"]))
            texts.append(format_response(step.action))
            history.append((step.observation, step.action))
    return texts


def expert_tool_conversations(env_factory: Callable[[], object], seeds: list[int],
                              success_rule: SuccessRule = SuccessRule()) -> list[list[dict]]:
    """The expert's solved episodes as tool-calling chats, for ``creditflow sft --tools``.

    Each episode is the chat TRL's ``environment_factory`` loop would have with a model that plays the expert:
    the env's ``tool_prompt()`` (the ``trl:`` adapter: TRL's own prompt; otherwise the task and the first
    observation as one user message), then per tool-call action an assistant message with that call and a
    tool message with its result (the next observation), and an expert action that is no tool call (the final
    answer, which ends a TRL episode) as plain assistant text. Only episodes the success rule counts as solved
    are kept. An expert action that is neither a tool call nor the last action, or demonstrations without any tool
    call, are a one-line :class:`UserError`: such an env has no tools to call."""
    env = _expert_env(env_factory)
    out = []
    for seed in seeds:
        traj = play(env, seed, planned_actions(env, seed), success_rule)
        if not traj.success:
            continue
        first = traj.steps[0] if traj.steps else None
        if callable(getattr(env, "tool_prompt", None)):
            chat = list(env.tool_prompt())
        else:
            text = "\n\n".join(p for p in (first.info.get("task", "") if first else "",
                                             first.observation if first else "") if p)
            chat = [{"role": "user", "content": text}]
        for k, step in enumerate(traj.steps):
            call = parse_tool_call(step.action)
            if call is None:
                if k != len(traj.steps) - 1:
                    raise UserError(f"env {name_of_env(env)!r}: sft.tools: the expert's action {step.action!r} (seed "
                                    f"{seed}, step {k}) is not a tool call (name(arg=value) or {{\"name\": ..., "
                                    "\"arguments\": {...}}); --tools trains tool-call demonstrations, for an env whose "
                                    "actions are tool calls, such as a trl:module:Class env (docs/trl.md)")
                chat.append({"role": "assistant", "content": step.action})
                break
            name, args, kwargs = call
            if args:
                raise UserError(f"env {name_of_env(env)!r}: sft.tools: the expert's call {step.action!r} (seed {seed}, "
                                f"step {k}) passes arguments by position; a tool call names them ({name}(arg=value))")
            chat.append(tool_call_message(name, kwargs))
            nxt = traj.steps[k + 1].observation if k + 1 < len(traj.steps) else traj.meta.get("final_observation", "")
            chat.append(tool_result_message(name, nxt))
        out.append(chat)
    if out and not any(m.get("tool_calls") for chat in out for m in chat):
        action = next(m["content"] for m in out[0] if m["role"] == "assistant")
        raise UserError(f"env {name_of_env(env)!r}: sft.tools: the expert called no tool in any episode (its action "
                        f"{action!r} is not a tool call); --tools trains tool-call demonstrations, for an env whose "
                        "actions are tool calls, such as a trl:module:Class env (docs/trl.md)")
    return out
