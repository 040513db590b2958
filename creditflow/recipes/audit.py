"""The credit audit's model parts: an LM as the behaviour policy (``creditflow audit --policy-model DIR``) and
candidate menus from a model at free-text states (``creditflow audit --model DIR``).

:class:`ModelPolicy` is the policy a user trains: every action of the audit's groups and of its Monte-Carlo
continuations is sampled from the model, at its sampling settings (``generation.temperature``, ``top_p``,
``max_new_tokens``) and with the prompt it was trained with (its template and history window, from
``creditflow_inference.json``), by the rollout engine's batched generation (:meth:`RolloutEngine.act
<creditflow.rollout.engine.RolloutEngine.act>`: one ``generate`` per lockstep turn of up to the Sim's chunk of
episodes; ``policy.backend=vllm`` where installed). Its response is parsed as in training: an unparseable or
non-admissible one is the invalid action the env would get (a no-op), and at a free-text state (no admissible
actions) its text is the action. Its prompt shows its last steps, so the policy is Markov in (state, history
window), not in ``state_key`` alone: the Monte Carlo restores each state with its own path and estimates the
advantage of that step in its context, the quantity a trainer's credit stands for. Sampling is seeded from the
audit's random stream before every batch (``torch.manual_seed``): on the ``hf`` backend an audit seed repeats
exactly.

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

import hashlib
import os
from pathlib import Path
from typing import Sequence

from creditflow.config import RunConfig, build_config
from creditflow.envs.base import has_snapshot
from creditflow.errors import UserError
from creditflow.policy.backends.factory import make_backend
from creditflow.policy.load import load_policy
from creditflow.policy.validate import check_model_dir
from creditflow.recipes.checks import check_run
from creditflow.recipes.resolve import with_model_settings
from creditflow.recipes.sections import engine_settings
from creditflow.rollout.engine import env_action, shown_action
from creditflow.rollout.factory import make_engine
from creditflow.rollout.trajectory import StartState
from creditflow.trainer.checkpoint import policy_in


class ModelPolicy:
    """An LM (a model or run dir) as the audit's behaviour policy (module docstring).

    ``ModelPolicy(dir)`` checks the directory at once (a one-line :class:`~creditflow.errors.UserError`: not a
    model dir); the model loads on first use, on the audit's env, with the config lines ``overrides`` (e.g.
    ``generation.max_new_tokens=16``) on top of the settings it was trained with. ``label``: its name in the
    record (default ``model=<dir name>``)."""

    history = True  # act() gets each state's path: its prompt window shows the last steps
    invalid_actions = True  # an unparseable response is the env's invalid action, as in training
    free_text = True  # at a state with no admissible actions it writes its own action

    def __init__(self, model_dir: str | os.PathLike, overrides: Sequence[str] = (), *, label: str | None = None,
                 env: str | None = None, env_options: dict | None = None, engine=None):
        path = Path(model_dir).expanduser()
        self.model_dir = policy_in(path)
        check_model_dir(self.model_dir)
        self.overrides = list(overrides)
        self.env, self.env_options = env, dict(env_options or {})
        self.engine = engine
        self.label = label or f"model={path.name}"
        self.name = f"LM {path}"
        self.cfg: RunConfig | None = None

    def bind(self, cfg: RunConfig, factory) -> "ModelPolicy":
        """Build the engine on ``factory()`` envs with ``cfg`` (the env's config) plus ``overrides`` and the model's
        saved settings; the audit calls this with its own env's config."""
        if self.engine is not None:
            return self
        cfg = build_config(None, [*self.overrides, *_vllm_where_installed(self.overrides)],
                           base={"env": cfg.model_dump()["env"]})
        check_run(cfg, model=self.model_dir)
        cfg = with_model_settings(cfg, self.model_dir, lambda *_: None)
        model, tok = load_policy(self.model_dir, cfg.policy.device, cfg.policy.weights_dtype)
        backend = make_backend(cfg.policy, cfg.seed, model, tok, self.model_dir)
        self.engine = make_engine(engine_settings(cfg), model, tok, factory, backend=backend)
        if self.engine.prompts.conversation:
            raise UserError("the audit's LM policy builds window prompts; this model was trained with "
                            "rollout.history=conversation")
        self.cfg = cfg
        return self

    def prepare(self, sim, tasks, seed) -> dict:
        """Bind to the audit's env if nobody did (its name from the Sim), and say what was audited."""
        if self.engine is None:
            base = build_config(None, [f"env.name={self.env or sim.name}"], base={"env": {"kwargs": self.env_options}})
            self.bind(base, sim.factory)
        stats = self.engine.stats
        self._at = (stats.generate_calls, stats.generated_tokens)
        try:
            shown = os.path.relpath(self.model_dir)
        except ValueError:
            shown = str(self.model_dir)
        if shown.startswith(".."):
            shown = str(self.model_dir)
        return {"model": shown, "sha256": weights_sha256(self.model_dir),
                "temperature": self.engine.sampling.temperature, "max_new_tokens": self.engine.sampling.max_new_tokens}

    def used(self) -> dict:
        """What the seed cost since :meth:`prepare`: batched ``generate`` calls and generated tokens."""
        stats = self.engine.stats
        calls, tokens = getattr(self, "_at", (0, 0))
        return {"generate_calls": stats.generate_calls - calls, "generated_tokens": stats.generated_tokens - tokens}

    def act(self, items, rng, contexts=None) -> list[str]:
        import torch

        if self.engine is None:
            raise UserError(f"{self.name}: not bound to an env (the audit calls prepare() or bind() first)")
        if contexts is None:
            raise UserError(f"{self.name}: the LM policy needs each state's path (contexts=)")
        torch.manual_seed(int(rng.integers(2 ** 62)))
        states = []
        for (actions, observations, observation, info) in contexts:
            history = [(observations[i] if i < len(observations) else "", shown_action(a))
                       for i, a in enumerate(actions)]
            states.append((info.get("task", ""), observation, history, info.get("admissible_actions")))
        return [env_action(p) for p in self.engine.act(states)]


def _vllm_where_installed(overrides: Sequence[str]) -> list[str]:
    """``policy.backend=vllm`` when vLLM is installed and a GPU is there, unless the overrides name a backend."""
    import importlib.util

    if any(o.split("=", 1)[0].strip() == "policy.backend" for o in overrides):
        return []
    if importlib.util.find_spec("vllm") is None:
        return []
    import torch

    return ["policy.backend=vllm"] if torch.cuda.is_available() else []


def weights_sha256(model_dir: Path) -> str | None:
    """sha256 of the model's first weights file (records name the weights they audited)."""
    files = sorted(Path(model_dir).glob("*.safetensors")) or sorted(Path(model_dir).glob("*.bin"))
    if not files:
        return None
    h = hashlib.sha256()
    with open(files[0], "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    return PolicyMenu(make_engine(engine_settings(cfg), model, tok, factory), size, expert)
