"""Seeding and RNG state capture (Python, NumPy, torch, CUDA and the loop's own generators), so a run
and its resume draw the same numbers."""

from __future__ import annotations

import random

import numpy as np
import torch

from creditflow.errors import UserError

SPLITS = ("validation", "test")
"""The held-out evaluation splits: ``validation`` for every choice, ``test`` for reported numbers only."""


def held_out_seeds(split: str, episodes: int, *, eval_seed_offset: int, test_seed_offset: int,
                   validation_episodes: int = 0, pool: int | None = None) -> list[int]:
    """The seeds of the first ``episodes`` tasks of a held-out split (docs/environments.md "Evaluation splits").

    Training draws seeds below ``eval_seed_offset``. ``validation`` is ``eval_seed_offset + i``. ``test`` is
    ``test_seed_offset + i`` on a procedurally generated env (``pool`` None); on an env whose held-out envs cycle
    through a finite pool of ``pool`` tasks (``reset(seed=z)`` plays task ``z % pool``), ``test`` walks that pool
    backwards from its last task, so it stays disjoint from the ``validation_episodes`` validation tasks as long
    as both fit in the pool (else a UserError says so)."""
    if split not in SPLITS:
        raise UserError(f"evaluation split must be one of {', '.join(SPLITS)}, got {split!r}")
    if episodes < 0:
        raise UserError(f"episodes must be >= 0, got {episodes}")
    if split == "validation":
        return [eval_seed_offset + i for i in range(episodes)]
    if pool is None:
        if test_seed_offset < eval_seed_offset + validation_episodes:
            raise UserError(f"env.test_seed_offset ({test_seed_offset}) must be at least env.eval_seed_offset + "
                            f"the validation tasks ({eval_seed_offset} + {validation_episodes}): the test seeds would "
                            "overlap the validation seeds")
        return [test_seed_offset + i for i in range(episodes)]
    if validation_episodes + episodes > pool:
        raise UserError(f"the env's held-out pool has {pool} tasks: {validation_episodes} validation + {episodes} "
                        "test tasks do not fit without overlapping (lower rl.eval_episodes or the test episodes)")
    return [eval_seed_offset + pool - 1 - i for i in range(episodes)]


def split_seeds(env_cfg, split: str, episodes: int, validation_episodes: int, env_factory=None) -> list[int]:
    """:func:`held_out_seeds` for a run's ``env`` config; the held-out pool (an env's ``num_tasks``, None for a
    procedurally generated env) is read from one env of ``env_factory`` when the test split needs it."""
    pool = None
    if split == "test" and env_factory is not None and episodes:
        pool = getattr(env_factory(), "num_tasks", None)
    return held_out_seeds(split, episodes, eval_seed_offset=env_cfg.eval_seed_offset,
                          test_seed_offset=env_cfg.test_seed_offset, validation_episodes=validation_episodes,
                          pool=pool)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state(task_rng: np.random.Generator, update_rng: np.random.Generator) -> dict:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "task_rng": task_rng.bit_generator.state,
        "update_rng": update_rng.bit_generator.state,
    }


def set_rng_state(state: dict, task_rng: np.random.Generator, update_rng: np.random.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    task_rng.bit_generator.state = state["task_rng"]
    update_rng.bit_generator.state = state["update_rng"]
