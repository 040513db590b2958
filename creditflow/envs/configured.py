"""The envs of a run, made from its ``env`` section (and the turn limit ``rollout.max_steps``): the train and
held-out factories (``env.kwargs``, ``env.eval_kwargs``), the checks a run makes on an env that is not built in,
its turn limit, and the one line for a stage that needs an expert the env does not have."""

from __future__ import annotations

from creditflow import envs
from creditflow.config import EnvConfig
from creditflow.envs.check import first_reset_problem
from creditflow.envs.checked import CheckedFactory
from creditflow.errors import UserError


def env_factory(cfg: EnvConfig, max_steps: int | None = None, split: str = "train",
                cuts: bool = True) -> envs.EnvFactory | CheckedFactory:
    """Zero-argument, picklable factory for train or held-out (``split="test"``) envs (:class:`envs.EnvFactory`);
    validates the options now, and for an env that is not built in (a plug-in, ``module:Class``, an object
    given to the Python API) the first reset too (:func:`check_user_env`). Such an env's factory is a
    :class:`~creditflow.envs.checked.CheckedFactory`: every value its envs return during the run is checked.
    ``max_steps``: ``rollout.max_steps``; ``cuts``: the caller cuts episodes there (the credit audit plays them to
    their end)."""
    kwargs = dict(cfg.kwargs)
    if split == "test":
        kwargs.update(cfg.eval_kwargs)
        if "split" in envs.env_options(cfg.name) and "split" not in cfg.eval_kwargs:
            kwargs["split"] = "test"
    try:
        factory = envs.factory(cfg.name, **kwargs)
        env = factory()  # fail early, with the env's own message, on bad options
        if not envs.is_builtin(cfg.name):
            check_user_env(cfg, env, max_steps, cuts)
    except envs.EnvError as exc:
        if split == "test" and cfg.eval_kwargs:
            raise envs.EnvError(f"held-out envs (env.kwargs + env.eval_kwargs): {exc}") from None
        raise
    if not envs.is_builtin(cfg.name):
        return CheckedFactory(factory, cfg.name, env_label(cfg))
    return factory


def env_label(cfg: EnvConfig) -> str:
    """How messages name the run's env: ``env 'x'``, with where it comes from when that is not its name."""
    where = envs.source(cfg.name)
    return f"env {cfg.name!r}" + ("" if where in ("built-in", cfg.name) else f" ({where})")


def check_user_env(cfg: EnvConfig, env, max_steps: int | None = None, cuts: bool = True) -> None:
    """What a run needs of an env that is not built in, checked on ``env`` before any work: a first reset that
    returns an observation and an info with every key of the protocol, of the right type, and a turn limit
    (the env's ``max_steps``, or ``max_steps``, the run's ``rollout.max_steps``, where the caller ``cuts`` episodes
    there). ``creditflow envs check`` runs every check."""
    problem = first_reset_problem(env)
    if problem is not None:
        raise envs.EnvError(f"{env_label(cfg)}: {problem} (creditflow envs check {cfg.name} runs every check)")
    if max_steps is None and turn_limit(max_steps, env) is None:
        raise envs.EnvError(f"{env_label(cfg)} has no max_steps (a positive integer): episodes need a turn limit; "
                            "set max_steps on the env" + (" or give rollout.max_steps" if cuts else ""))


def turn_limit(max_steps: int | None, env) -> int | None:
    """The most turns of an episode: ``max_steps`` (``rollout.max_steps``), capped by the env's own."""
    own = getattr(env, "max_steps", None)
    own = own if isinstance(own, int) and not isinstance(own, bool) and own >= 1 else None
    limits = [n for n in (max_steps, own) if n is not None]
    return min(limits) if limits else None


def require_expert(cfg: EnvConfig, factory, need: str) -> None:
    """One line, before any work, when a stage that needs expert demonstrations (``need`` says which and what
    to do instead) runs on an env without ``expert_actions()``."""
    if not callable(getattr(factory(), "expert_actions", None)):
        raise UserError(f"{env_label(cfg)} has no expert (an expert_actions() method): {need}")
