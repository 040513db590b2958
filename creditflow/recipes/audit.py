"""The credit audit's candidate menus from a model (``creditflow audit --model DIR``).

At a free-text state (WebShop's search page, every SQL query) the env offers no admissible actions, so the
audit's behaviour policies have nothing to choose among. :class:`PolicyMenu` gives them the actions a model
proposes there: ``size`` one-turn branches of the rollout engine from the restored state (what the RRO sampler
draws as candidates: the model's template, history and sampling temperature, its raw output parsed as in
training, an unparseable one kept as the invalid action the env would get), plus the env's expert action
where it has one. ``creditflow.auditing.sim.Sim`` asks once per (seed, ``state_key``) and keeps the answer, so
the ε-expert stays a Markov policy over a fixed finite set there and Monte Carlo from a restored state still
estimates its Q^π.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from creditflow.config import RunConfig
from creditflow.envs.base import has_snapshot
from creditflow.policy.model import load_policy
from creditflow.policy.factory import with_model_settings
from creditflow.recipes.checks import check_run
from creditflow.rollout.factory import make_engine
from creditflow.rollout.trajectory import StartState
from creditflow.trainer.checkpoint import policy_in


class PolicyMenu:
    """``menu(seed, actions, observations, observation, info, env)``: ``size`` actions sampled from the model
    at that state (duplicates kept once by the audit), then the env's expert action (``expert=True``)."""

    def __init__(self, engine, size: int, expert: bool = True):
        self.engine, self.size, self.expert = engine, int(size), bool(expert)
        self.calls = 0

    def __call__(self, seed: int, actions: Sequence[str], observations: Sequence[str], observation: str,
                 info: dict, env) -> list[str]:
        self.calls += 1
        snap = env.snapshot() if has_snapshot(env) else None
        state = StartState(seed, list(actions), [*observations, observation], snap)
        trajs = self.engine.branch(state, self.size, task_id=f"menu/{seed}/{len(actions)}", max_turns=1)
        out = [t.steps[0].action for t in trajs if t.steps]
        plan = getattr(env, "expert_actions", None)
        if self.expert and callable(plan):
            first = (plan() or [None])[0]
            if first is not None:
                out.append(first)
        return out


def policy_menu(cfg: RunConfig, model_path: str | Path, factory, size: int = 4, expert: bool = True,
                log=print) -> PolicyMenu:
    """A :class:`PolicyMenu` of the model in ``model_path`` (a model dir, or a run dir for its newest
    checkpoint) with the settings it was trained with (``creditflow_inference.json``), sampling at
    ``generation.temperature``, on ``factory()`` envs."""
    model_path = policy_in(model_path)
    check_run(cfg, model=model_path)
    cfg = with_model_settings(cfg, model_path, log)
    model, tok = load_policy(model_path, cfg.policy.device, cfg.policy.weights_dtype)
    return PolicyMenu(make_engine(cfg, model, tok, factory), size, expert)
