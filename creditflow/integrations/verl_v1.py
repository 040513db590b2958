"""creditflow's estimators in verl's v1 trainer (``trainer.use_v1=True``, verl 0.9's default).

**verl's v1 data path.** The agent loop returns one ``AgentLoopOutput`` per turn (or one per session); the
agent-loop worker puts each into the TransferQueue under the key ``{uid}_{session_id}_{index}`` (uid: the
prompt, i.e. the group; session_id: the rollout among ``rollout.n``; index: the output's position in the
session), with the output's ``extra_fields`` dict. The trainer's ``_compute_advantage`` reads back only
``uid``, ``response_mask``, ``rm_scores`` and the log-probs, rebuilds ``uid`` as plain strings and calls
``compute_advantage_for_multi_trajectories``, which hands every estimator but GRPO to ``compute_advantage``
unchanged; a registered estimator gets ``token_level_rewards``, ``response_mask``, ``index`` (the plain
uids) and ``config``. Nothing of a step but its tokens and the session's reward reaches it.

**The route.** :class:`CreditflowAdvantage` overrides ``_compute_advantage`` alone. For a creditflow
estimator (``algorithm.adv_estimator`` in :data:`~creditflow.integrations.verl.ESTIMATORS`) it reads the
batch's ``uid`` and ``extra_fields`` from the TransferQueue (one more get), builds the rows
(:func:`rows_from_outputs`: trajectory ``{uid}_{session_id}`` and step ``index`` from the key, the other
fields from ``extra_fields``, verl's padding rows inactive), then runs verl's own ``_compute_advantage``
with the rows :func:`~creditflow.integrations.verl.attached`, and adds the credit metrics to verl's step
metrics. For any other estimator it is verl's method. :func:`install` (creditflow's ``creditflow_v1``
``verl.plugins`` entry point calls it on ``import verl``) puts this module's subclass of each trainer class
(:data:`TRAINERS`) in verl's trainer registry under the same name (``sync``, ``colocate_async``,
``separate_async``), so ``python -m verl.trainer.main_ppo`` picks it up with ``trainer.v1.trainer_mode``
unchanged. A trainer class of one's own takes the mixin first: ``class MyTrainer(CreditflowAdvantage,
PPOTrainerSync)``.

Why this route (docs/verl.md has the comparison): the ``uid`` cannot carry the rows here (the worker writes
the prompt uid itself and the TransferQueue's msgpack codec stores plain strings); a custom replay buffer
(``trainer.v1.sampler.custom_sampler``) is built with fewer arguments than verl's own and changes sampling;
a new ``trainer_mode`` name switches verl's ``trainer_mode == "sync"`` branches to async behaviour; patching
``compute_advantage`` would change every estimator's path. The override leaves verl's code, its sampling
and its other estimators as they are.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from creditflow.credit import estimator_needs
from creditflow.integrations import verl as cf_verl
from creditflow.integrations import plugins
from creditflow.integrations.rows import call_metrics
from creditflow.integrations.verl import STATE_KEYS, SUCCESS_KEYS

# the layout's extra_fields keys are the legacy layout's (STATE_KEYS, SUCCESS_KEYS), each looked up in
# extra_fields, then in extra_fields["reward_extra_info"] (what verl's reward function returned)
_MISSING = object()
_RENAMED = {"STATE_FIELDS": "STATE_KEYS", "SUCCESS_FIELDS": "SUCCESS_KEYS"}


def __getattr__(name: str):
    if name in _RENAMED:  # one release: the v1 copies of the legacy names
        warnings.warn(f"creditflow.integrations.verl_v1.{name} is deprecated: use "
                      f"creditflow.integrations.verl.{_RENAMED[name]}", DeprecationWarning, stacklevel=2)
        return getattr(cf_verl, _RENAMED[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lookup(extra: dict, names: Sequence[str]) -> Any:
    info = extra.get("reward_extra_info") or {}
    for source in (extra, info if isinstance(info, dict) else {}):
        for name in names:
            if name in source:
                return source[name]
    return _MISSING


def parse_key(key: str) -> tuple[str, str, int]:
    """``{uid}_{session_id}_{index}`` -> (uid, trajectory id ``{uid}_{session_id}``, step index)."""
    fields = str(key).rsplit("_", 2)
    if len(fields) != 3 or not fields[2].lstrip("-").isdigit():
        raise cf_verl.VerlLayoutError(f"verl v1 output key {key!r} is not {{uid}}_{{session_id}}_{{index}}")
    return fields[0], f"{fields[0]}_{fields[1]}", int(fields[2])


def rows_from_outputs(keys: Sequence[str], uids: Sequence[str], extra_fields: Sequence[dict],
                      padding: Sequence[bool] | None = None, estimator: str = "rewardflow") -> np.ndarray:
    """The :class:`~creditflow.integrations.verl.RowUid` of each v1 output, in ``keys`` order.

    ``keys``: the TransferQueue keys (``{uid}_{session_id}_{index}``); ``uids``: their ``uid`` field (the
    group); ``extra_fields``: their ``extra_fields`` dicts; ``padding``: verl's synthetic padding rows (tag
    ``is_padding``), which take no part and get advantage 0. Per active row, ``extra_fields`` (or its
    ``reward_extra_info``) holds ``state_key`` or ``anchor_obs`` (RewardFlow, GiGPO), ``success`` (or
    ``won``) and ``rewards``; optional ``next_state_key``, ``is_action_valid``, ``active_masks``, ``score``.
    A missing one is one :class:`~creditflow.integrations.verl.VerlLayoutError` naming the field and the
    output."""
    n = len(keys)
    if not len(uids) == len(extra_fields) == n:
        raise cf_verl.VerlLayoutError(f"verl v1 batch: {n} keys, {len(uids)} uids, {len(extra_fields)} extra_fields")
    padding = [False] * n if padding is None else [bool(p) for p in padding]
    extras = [dict(e or {}) for e in extra_fields]
    needs_state = "state" in estimator_needs(cf_verl.ESTIMATORS.get(estimator, estimator))

    def column(names: Sequence[str], what: str, default: Any = _MISSING) -> list:
        values = []
        for key, extra, pad in zip(keys, extras, padding):
            value = _lookup(extra, names)
            if value is _MISSING and not pad and default is _MISSING:
                named = repr(names[0]) + "".join(f" (or {x!r})" for x in names[1:])
                raise cf_verl.VerlLayoutError(f"verl v1 batch for {estimator!r}: the agent loop output {key!r} has "
                                              f"no {named} in extra_fields: {what} (docs/verl.md)")
            values.append(None if value is _MISSING else value)
        return values

    active = [not pad and (flag is None or bool(flag))
              for pad, flag in zip(padding, column(("active_masks",), "", default=None))]
    parsed = [parse_key(k) for k in keys]
    # one state field for the batch: state_key where the agent loop gives it, else anchor_obs
    given = [f for f in STATE_KEYS if any(_lookup(e, (f,)) is not _MISSING for e in extras)]
    states = (column(given[:1] or STATE_KEYS, f"the state of the step, which {estimator!r} needs") if needs_state
              else column(given[:1] or STATE_KEYS, "", default=""))
    nt = {
        "uid": np.array([str(u) for u in uids], dtype=object),
        "traj_uid": np.array([traj for _, traj, _ in parsed], dtype=object),
        "step_index": np.array([step for _, _, step in parsed], dtype=np.int64),
        "state_key": np.array(["" if s is None else s for s in states], dtype=object),
        "rewards": np.array([0.0 if r is None else float(r) for r in
                             column(("rewards",), "the env reward of the step (0 where there is none)")]),
        "success": np.array([bool(s) for s in column(SUCCESS_KEYS, "the outcome of the output's episode")]),
        "is_action_valid": np.array([True if v is None else bool(v) for v in
                                     column(("is_action_valid",), "", default=True)]),
        "next_state_key": np.array(column(("next_state_key",), "", default=None), dtype=object),
        "active_masks": np.array(active, dtype=bool),
    }
    observations = column(("anchor_obs",), "", default=None)
    if any(o is not None for o in observations):
        nt["anchor_obs"] = np.array(["" if o is None else o for o in observations], dtype=object)
    scores = column(("score",), "", default=None)
    has_score = [s is not None for s, a in zip(scores, active) if a]
    if any(has_score):
        if not all(has_score):
            missing = next(k for k, s, a in zip(keys, scores, active) if a and s is None)
            raise cf_verl.VerlLayoutError(f"verl v1 batch for {estimator!r}: the agent loop output {missing!r} has no "
                                          "'score' in extra_fields, and other outputs have one (docs/verl.md)")
        nt["score"] = np.array([0.0 if s is None else float(s) for s in scores])
    return cf_verl.row_uids(nt, estimator)


def _plain(value: Any) -> Any:
    """A TransferQueue non-tensor value as a Python value (NonTensorData wraps it in ``.data``)."""
    return getattr(value, "data", value)


class CreditflowAdvantage:
    """Mixin for verl's v1 ``PPOTrainer`` classes: creditflow's estimators get their rows (module docstring);
    every other estimator runs verl's ``_compute_advantage`` unchanged."""

    def _compute_advantage(self, batch, metrics: dict):
        estimator = str(getattr(self.config.algorithm.adv_estimator, "value", self.config.algorithm.adv_estimator))
        if estimator not in cf_verl.ESTIMATORS:
            return super()._compute_advantage(batch, metrics)
        got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields"])
        rows = rows_from_outputs(batch.keys, [str(_plain(u)) for u in got["uid"]],
                                 [_plain(e) for e in got["extra_fields"]],
                                 padding=[bool(tag.get("is_padding", False)) for tag in batch.tags],
                                 estimator=estimator)
        with cf_verl.attached(rows) as call:
            batch = super()._compute_advantage(batch, metrics)
        metrics.update(call_metrics(call))
        return batch


class CreditflowPPOTrainerSync(CreditflowAdvantage, PPOTrainerSync):
    """verl's ``PPOTrainerSync`` (``trainer_mode=sync``) whose creditflow estimators get their rows (docs/verl.md)."""


class CreditflowPPOTrainerColocateAsync(CreditflowAdvantage, PPOTrainerColocateAsync):
    """verl's ``PPOTrainerColocateAsync`` whose creditflow estimators get their rows (docs/verl.md)."""


class CreditflowPPOTrainerSeparateAsync(CreditflowAdvantage, PPOTrainerSeparateAsync):
    """verl's ``PPOTrainerSeparateAsync`` whose creditflow estimators get their rows (docs/verl.md)."""


TRAINERS = {"sync": CreditflowPPOTrainerSync, "colocate_async": CreditflowPPOTrainerColocateAsync,
            "separate_async": CreditflowPPOTrainerSeparateAsync}
"""verl's v1 trainer mode -> creditflow's subclass of verl's trainer class for it."""


def install() -> dict:
    """Put creditflow's subclass of each trainer class (:data:`TRAINERS`) in verl's v1 trainer registry, under the
    same name (idempotent; creditflow's ``verl.plugins`` entry point calls it on ``import verl``). A mode whose
    registered class is not verl's own one (another plugin's) is left as it is. Returns the registry."""
    registry = trainer_base.TRAINER_REGISTRY
    for mode, cls in TRAINERS.items():
        if registry.get(mode) in cls.__bases__:
            registry[mode] = cls
    return registry


__all__ = ["CreditflowAdvantage", "CreditflowPPOTrainerColocateAsync", "CreditflowPPOTrainerSeparateAsync",
           "CreditflowPPOTrainerSync", "TRAINERS", "install", "parse_key", "rows_from_outputs"]


plugins.imported(__name__)  # the last line: a verl.plugins registration that waited for this module runs now
