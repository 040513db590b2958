"""Shared by the integration tests (verl, SkyRL): the expected advantages (``creditflow.credit.score``) and
multi-turn token layouts in which every turn's response holds the model's tokens and then the env/tool
tokens (mask 0), as verl's multi-turn agent loops and SkyRL's step-wise generator write them."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from creditflow import credit
from creditflow.credit import registry
from creditflow.credit.grpo import GRPOKnobs, grpo
from creditflow.integrations.rows import ESTIMATORS
from creditflow.rollout.trajectory import Trajectory

EXTRA = "zz_test_grpo"


@pytest.fixture
def extra_estimator():
    """An estimator a test registers (GRPO's kernel under a new name, declaring that it reads states): every
    bridge takes it with no edit of its own."""
    registry.register_estimator(EXTRA, knobs=GRPOKnobs, needs={"state"})(grpo)
    yield EXTRA
    registry._ESTIMATORS.pop(EXTRA)


def expected(trajs, name, **knobs) -> np.ndarray:
    """creditflow.credit.score's per-step advantages (trajectory after trajectory, then step), with verl's
    ddof=1 where the estimator has a std."""
    est = ESTIMATORS[name]
    if "ddof" in credit.knob_model(est).model_fields:
        knobs.setdefault("ddof", 1)
    knobs.setdefault("reward_source", credit.knob_model(est).model_fields["reward_source"].default)
    return np.array([s.advantage for t in credit.score(trajs, estimator=est, **knobs) for s in t.steps])


def row_advantages(adv: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The one advantage of each row: every token with mask 1 carries it, every token with mask 0 carries 0.
    A row without response tokens reads 0."""
    mask = mask.astype(bool)
    first = mask.argmax(-1)
    value = np.where(mask.any(-1), adv[np.arange(len(adv)), first], 0.0)
    np.testing.assert_array_equal(adv, value[:, None] * mask)
    return value


MODEL, ENV = 1, 0


def _encode(text: str, base: int, n: int = 8) -> list[int]:
    """``n`` token ids in [base, base + 50) that stand for ``text`` (equal texts, equal ids)."""
    return [base + b % 50 for b in hashlib.blake2b(text.encode(), digest_size=n).digest()]


def turn_tokens(trajs: list[Trajectory], seed: int = 0) -> list[list[tuple[list[int], list[int], list[int]]]]:
    """Per trajectory, per step: (prompt_ids, response_ids, response_mask). The response is the model's tokens
    (mask 1: 1 to 4 of them) then, except after the last step, the env's reply (mask 0): the next state's
    tokens. The prompt is the whole conversation before the turn (verl's and SkyRL's multi-turn outputs),
    starting with the task's system prompt and first state. Token ids are distinct per role: model 1000+,
    env 2000+, system prompt 3000+."""
    rng = np.random.default_rng(seed)
    out = []
    for t in trajs:
        history = _encode(t.group_id, 3000, 4) + _encode(t.steps[0].state, 2000)
        turns = []
        for i in range(len(t.steps)):
            model = [1000 + int(x) for x in rng.integers(0, 50, size=int(rng.integers(1, 5)))]
            env = [] if i == len(t.steps) - 1 else _encode(t.steps[i + 1].state, 2000)
            turns.append((list(history), model + env, [MODEL] * len(model) + [ENV] * len(env)))
            history = history + model + env
        out.append(turns)
    return out
