"""Every registered estimator (and each of its presets) as an audit arm, run on recorded episodes.

Arms come from the registry (:func:`creditflow.credit.estimator_names`): an estimator with a ``preset`` knob
gives one arm per preset besides its default (``gigpo`` and ``gigpo_official``), so an estimator registered
later joins every part of the audit with no change here. Each arm runs the registered kernel through
:func:`creditflow.credit.api.credit_arrays` on the episodes' :class:`~creditflow.credit.Rows`: the reward is the
success outcome on an episode's last step and 0 elsewhere (the audit's target is success), ``valid`` the env's
``action_valid``; the state after a step is the next row's (no ``next_state_keys``), so that an estimator closes
an episode as it does a trainer's (a shared success node, a private dead end).

:func:`trajectory_level` is the same estimator on the same episodes with every state made private to its
step (no state is shared, so no step-level comparison can form): the value an estimator falls back to when
its step-level part has nothing to compare. A step whose advantage equals it is "left at the trajectory-level
value"; an estimator that gives every step that value on every batch does not read ``state_key``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.auditing.sim import Episode
from creditflow.credit.api import credit_arrays
from creditflow.credit.rows import Rows
from creditflow.credit.registry import CreditError, estimator_names, knob_model, validate_knobs


@dataclass(frozen=True)
class Arm:
    """An audit arm: estimator ``estimator`` with ``knobs`` (a preset), named ``name``."""

    name: str
    estimator: str
    knobs: dict = field(default_factory=dict)


def arms(only: Sequence[str] | None = None, knobs: Mapping[str, Mapping] | None = None) -> list[Arm]:
    """Every registered estimator and preset (``only``: those arm or estimator names; unknown ones are a
    one-line :class:`AuditError`). ``knobs``: arm name -> knob values that arm runs with on top of its preset,
    e.g. ``{"graphgpo": {"omega": 0.8}}`` (checked by :func:`check_knobs`)."""
    knobs = knobs or {}
    out = []
    for name in estimator_names():
        out.append(Arm(name, name))
        model = knob_model(name)
        if "preset" in model.model_fields:
            default = model.model_fields["preset"].default
            out += [Arm(f"{name}_{p}", name, {"preset": p}) for p in model.presets if p != default]
    out = [Arm(a.name, a.estimator, {**a.knobs, **knobs[a.name]}) if a.name in knobs else a for a in out]
    if only is None:
        return out
    known = {a.name for a in out}
    bad = [o for o in only if o not in known]
    if bad:
        raise AuditError(f"unknown estimator {bad[0]!r}; available: {', '.join(sorted(known))}")
    return [a for a in out if a.name in only]


def check_knobs(knobs: Mapping[str, Mapping] | None) -> None:
    """Each key of ``knobs`` is an arm and its values are valid knobs of the arm's estimator (one-line
    :class:`AuditError` naming the arm and the knob)."""
    by_name = {a.name: a for a in arms()}
    for name, values in (knobs or {}).items():
        if name not in by_name:
            raise AuditError(f"knobs: unknown arm {name!r}; available: {', '.join(sorted(by_name))}")
        if not isinstance(values, Mapping):
            raise AuditError(f"knobs[{name!r}] must be a mapping of knob names to values, got {values!r}")
        try:
            validate_knobs(by_name[name].estimator, {**by_name[name].knobs, **values})
        except CreditError as e:
            raise AuditError(f"knobs[{name!r}]: {e}") from None


def episode_rows(episodes: Sequence[Episode]) -> Rows:
    """One row per step of ``episodes``, episode after episode (module docstring)."""
    group_ids, traj_ids, index, keys, rewards, success, valid, obs = [], [], [], [], [], [], [], []
    for e, ep in enumerate(episodes):
        n = len(ep.steps)
        group_ids += [ep.group] * n
        traj_ids += [f"t{e}"] * n
        index += range(n)
        keys += [s.node.key for s in ep.steps]
        rewards += [0.0] * (n - 1) + [1.0 if ep.success else 0.0]
        success += [ep.success] * n
        valid += [s.valid for s in ep.steps]
        obs += [s.node.observation for s in ep.steps]
    return Rows(group_ids, traj_ids, np.asarray(index, dtype=np.int64), keys, np.asarray(rewards),
                np.asarray(success, dtype=bool), valid=np.asarray(valid, dtype=bool), observations=obs)


def arm_advantages(arm: Arm, rows: Rows, private: bool = False) -> np.ndarray:
    """(S,) the arm's advantage of every row of ``rows``; ``private``: every state private to its row."""
    if private:
        keys = [f"{t}#{i}" for t, i in zip(rows.traj_ids, rows.step_index.tolist())]
        rows = replace(rows, state_keys=keys, observations=[f"{k}\n{o}" for k, o in zip(keys, rows.observations)])
    try:
        out = credit_arrays(arm.estimator, rows, check_outcome=False, **arm.knobs)
    except CreditError as exc:
        raise AuditError(f"estimator {arm.name!r}: {exc}") from None
    return out.advantage


def trajectory_level(arm: Arm, rows: Rows) -> np.ndarray:
    """The arm's advantages with no state shared between steps (module docstring)."""
    return arm_advantages(arm, rows, private=True)


def _probe() -> Rows:
    """Three rollouts of one task sharing states ``a`` and ``c``, two of them successful."""
    keys = [["a", "b"], ["a", "c"], ["a", "c", "b"]]
    won = [True, False, True]
    rows = [(t, i, k, w) for t, (ks, w) in enumerate(zip(keys, won)) for i, k in enumerate(ks)]
    last = {t: len(ks) - 1 for t, ks in enumerate(keys)}
    return Rows(["g"] * len(rows), [f"t{t}" for t, *_ in rows], np.array([i for _, i, _, _ in rows]),
                [k for *_, k, _ in rows], np.array([1.0 if w and i == last[t] else 0.0 for t, i, _, w in rows]),
                np.array([w for *_, w in rows]), valid=np.ones(len(rows), dtype=bool),
                observations=[k for *_, k, _ in rows])


def reads_state(arm: Arm) -> bool:
    """Whether the arm's credit depends on shared states: on a probe batch whose rollouts share states, some
    advantage differs from its trajectory-level value."""
    cols = _probe()
    return bool(np.any(np.abs(arm_advantages(arm, cols) - trajectory_level(arm, cols)) > 1e-9))
