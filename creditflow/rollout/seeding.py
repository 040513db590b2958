"""Seeding and RNG state capture (Python, NumPy, torch, CUDA and the loop's own generators), so a run
and its resume draw the same numbers."""

from __future__ import annotations

import random

import numpy as np
import torch


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
