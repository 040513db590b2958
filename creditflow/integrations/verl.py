"""creditflow's estimators inside verl (0.9): registered advantage estimators, verl-agent's row layout,
DataProto <-> Trajectory, and the credit metrics for verl's metrics dict.

**Layout** (verl-agent's, one row per step; ``non_tensor_batch`` arrays):

==================  ========================================================================
``uid``             group: the rollouts compared with one another (verl's own key)
``traj_uid``        trajectory id
``anchor_obs``      the step's observation; also its state key unless ``state_key`` is given
``state_key``       optional: the state s_t (creditflow's ``Step.state``)
``next_state_key``  optional: s_{t+1} (else the next row's state; after the last row a shared
                    success node or a private dead end)
``rewards``         the step's env reward (with any invalid-action penalty)
``success``         the episode's outcome, on every row of the trajectory (``won`` also accepted)
``is_action_valid`` optional, default true (RewardFlow prunes invalid steps)
``active_masks``    optional, default true; inactive rows get advantage 0 and take no part
``step_index``      optional: the step's position (default: row order when the rows are attached)
``score``           optional: the episode's graded score (``reward_source=score``)
==================  ========================================================================

**How the rows reach the estimator.** verl's ``compute_advantage`` calls a registered estimator with
``token_level_rewards``, ``response_mask``, ``index`` (= ``non_tensor_batch["uid"]``) and ``config`` only.
:func:`attach_rows` (one line where the rollout batch is assembled) replaces each ``uid`` by a
:class:`RowUid`: the same string (equal, same hash: every verl estimator groups as before) carrying its
row's fields, so the estimators read them from ``index``. It travels with the row through ``reorder``,
``select_idxs``, ``concat`` and Ray (pickled with its fields). A trainer that calls a
``compute_advantage`` of its own (verl-agent's fork) can instead call :func:`compute_advantage` here, which
reads ``non_tensor_batch`` directly. Rows duplicated to pad the batch (verl-agent's ``adjust_batch``)
share their original's advantage.

**Registration.** Importing this module registers ``rewardflow``, ``gigpo``, ``creditflow_grpo`` and
``creditflow_rloo`` with ``verl.trainer.ppo.core_algos.register_adv_est``; creditflow's ``verl.plugins``
entry point imports it on ``import verl`` in every process. ``grpo``/``rloo`` are verl's own names
(``compute_advantage`` dispatches ``grpo`` before the registry), hence the prefix. Knobs come from
``algorithm.creditflow`` (e.g. ``+algorithm.creditflow.gamma=0.9``); ``ddof`` defaults to verl's
convention, 1 (sample std), for every estimator that divides by a std.
"""

from __future__ import annotations

import weakref
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from verl import DataProto  # this module is the verl bridge: verl is its reason to exist
from verl.trainer.ppo import core_algos

from creditflow.credit import credit_arrays, knob_model
from creditflow.curriculum.diagnostics import group_diagnostics
from creditflow.errors import UserError
from creditflow.rollout.trajectory import Step, Trajectory

# verl name -> creditflow estimator
ESTIMATORS = {"rewardflow": "rewardflow", "gigpo": "gigpo", "creditflow_grpo": "grpo", "creditflow_rloo": "rloo"}
VERL_DDOF = 1  # verl's std (torch.std): the sample std
STATE_KEYS = ("state_key", "anchor_obs")  # the state of a row: creditflow's state key, else the observation
SUCCESS_KEYS = ("success", "won")


class VerlLayoutError(UserError):
    """A verl batch that lacks a field of the row layout, or rows that do not describe trajectories."""


# --------------------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------------------


class RowUid(str):
    """A verl ``uid`` (the group id: equal to and hashing as the plain string) that carries its row's
    fields for creditflow's estimators (``fields``: traj_uid, step_index, state_key, ...)."""

    fields: dict

    def __new__(cls, uid: str, fields: Mapping[str, Any] | None = None):
        obj = super().__new__(cls, uid)
        obj.fields = dict(fields or {})
        return obj

    def __reduce__(self):
        return (RowUid, (str(self), self.fields))


def layout_columns(non_tensor_batch: Mapping[str, np.ndarray], estimator: str = "rewardflow") -> dict:
    """The row columns of a verl-agent ``non_tensor_batch`` (see the module docstring); a missing key is one
    :class:`VerlLayoutError` naming it."""
    n = len(_need(non_tensor_batch, "uid", estimator, "the group of each row"))
    get = non_tensor_batch.get
    state_key = next((k for k in STATE_KEYS if k in non_tensor_batch), None)
    if state_key is None and ESTIMATORS.get(estimator, estimator) in ("rewardflow", "gigpo"):
        raise VerlLayoutError(f"verl batch for {estimator!r}: non_tensor_batch has no 'anchor_obs' (or "
                              "'state_key'): the state of each row, which its state groups need (docs/verl.md)")
    success_key = next((k for k in SUCCESS_KEYS if k in non_tensor_batch), None)
    if success_key is None:
        raise VerlLayoutError(f"verl batch for {estimator!r}: non_tensor_batch has no 'success' (or 'won'): the "
                              "episode outcome of each row (docs/verl.md)")
    traj = _need(non_tensor_batch, "traj_uid", estimator, "the trajectory of each row")
    steps = get("step_index")
    return {
        "group_ids": [str(u) for u in non_tensor_batch["uid"]],
        "traj_ids": list(traj),
        "step_index": _row_order(traj) if steps is None else np.asarray(steps).astype(np.int64),
        "state_keys": list(non_tensor_batch[state_key]) if state_key else [""] * n,
        "next_state_keys": None if get("next_state_key") is None else list(get("next_state_key")),
        "observations": None if get("anchor_obs") is None else list(get("anchor_obs")),
        "rewards": np.asarray(_need(non_tensor_batch, "rewards", estimator, "the env reward of each step"),
                              dtype=np.float64),
        "success": np.asarray(non_tensor_batch[success_key]).astype(bool),
        "valid": None if get("is_action_valid") is None else np.asarray(get("is_action_valid")).astype(bool),
        "active": (np.ones(n, dtype=bool) if get("active_masks") is None
                   else np.asarray(get("active_masks")).astype(bool)),
        "scores": None if get("score") is None else np.asarray(get("score"), dtype=np.float64),
    }


def _need(batch: Mapping[str, np.ndarray], key: str, estimator: str, what: str) -> np.ndarray:
    if key not in batch:
        raise VerlLayoutError(f"verl batch for {estimator!r}: non_tensor_batch has no {key!r}: {what} (docs/verl.md)")
    return batch[key]


def _row_order(traj_ids) -> np.ndarray:
    """Position of each row among the rows of its trajectory, in row order."""
    count: dict = {}
    out = np.empty(len(traj_ids), dtype=np.int64)
    for row, traj in enumerate(traj_ids):
        out[row] = count.get(traj, 0)
        count[traj] = out[row] + 1
    return out


def attach_rows(data: DataProto, estimator: str = "rewardflow") -> DataProto:
    """Replace ``non_tensor_batch["uid"]`` by :class:`RowUid` values carrying each row's layout fields, so that
    verl's own ``compute_advantage`` can run creditflow's registered estimators. Call it where the rollout
    batch is assembled (before ``balance_batch`` reorders rows, when there is no ``step_index``)."""
    cols = layout_columns(data.non_tensor_batch, estimator)
    values = {k: _as_list(v) for k, v in cols.items() if k != "group_ids" and v is not None}  # absent: left out
    data.non_tensor_batch["uid"] = np.array(
        [RowUid(g, {k: column[i] for k, column in values.items()}) for i, g in enumerate(cols["group_ids"])],
        dtype=object)
    return data


def _as_list(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _columns_from_uids(index: Sequence, estimator: str) -> dict:
    """The row columns carried by :class:`RowUid` values."""
    if len(index) and not all(isinstance(u, RowUid) for u in index):
        raise VerlLayoutError(
            f"verl passes only non_tensor_batch['uid'] to {estimator!r}, and these uids carry no rows: call "
            "creditflow.integrations.verl.attach_rows(batch) where the rollout batch is assembled, or "
            "creditflow.integrations.verl.compute_advantage (docs/verl.md)")
    fields = [u.fields for u in index]
    column = (lambda k: [f[k] for f in fields] if fields and k in fields[0] else None)
    cols = {k: column(k) for k in ("traj_ids", "step_index", "state_keys", "next_state_keys", "observations",
                                    "rewards", "success", "valid", "active", "scores")}
    cols["group_ids"] = [str(u) for u in index]
    cols["step_index"] = np.asarray(cols["step_index"] or [], dtype=np.int64)
    cols["rewards"] = np.asarray(cols["rewards"] or [], dtype=np.float64)
    cols["success"] = np.asarray(cols["success"] or [], dtype=bool)
    cols["active"] = np.asarray(cols["active"] or [True] * len(fields), dtype=bool)
    cols["traj_ids"] = cols["traj_ids"] or []
    cols["state_keys"] = cols["state_keys"] or [""] * len(fields)
    return cols


# --------------------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------------------

_LAST: dict = {"index": None, "metrics": {}}


def estimator_knobs(estimator: str, config: Any) -> dict:
    """creditflow knobs from ``config.creditflow`` (verl's ``algorithm`` section), with verl's ``ddof=1``
    for estimators that divide by a std unless given."""
    given = {} if config is None else dict(config.get("creditflow", None) or {})
    if "ddof" in knob_model(ESTIMATORS[estimator]).model_fields:
        given.setdefault("ddof", VERL_DDOF)
    return given


def row_advantages(estimator: str, cols: dict, config: Any = None) -> tuple[np.ndarray, dict]:
    """Per-row advantages (0 for inactive rows; duplicated rows share their original's) and the metrics."""
    n = len(cols["group_ids"])
    active = np.asarray(cols["active"], dtype=bool) if cols.get("active") is not None else np.ones(n, bool)
    traj = np.asarray(cols["traj_ids"], dtype=object)
    steps = np.asarray(cols["step_index"], dtype=np.int64)
    keep = np.flatnonzero(active)
    if keep.size == 0:  # nothing to score (credit_arrays refuses an empty batch)
        return np.zeros(n, dtype=np.float64), {}
    # rows repeated to pad the batch (same trajectory and step): compute once, copy
    first_of, inverse = _first_occurrence(traj[keep], steps[keep])
    rows = keep[first_of].tolist()
    picked = {name: _pick(cols.get(name), rows) for name in _ARRAY_COLUMNS}
    picked["step_index"] = steps[rows]
    result = credit_arrays(ESTIMATORS[estimator], check_outcome=False, **picked, **estimator_knobs(estimator, config))
    advantage = np.zeros(n, dtype=np.float64)
    advantage[keep] = result.advantage[inverse]
    return advantage, result.metrics


# the columns credit_arrays takes, by their names there
_ARRAY_COLUMNS = ("group_ids", "traj_ids", "state_keys", "rewards", "success", "valid", "observations", "scores",
                  "next_state_keys")


def _pick(column, rows: list[int]):
    """``column`` at ``rows`` (an array stays an array; None stays None)."""
    if column is None:
        return None
    if isinstance(column, np.ndarray):
        return column[rows]
    return [column[i] for i in rows]


def _first_occurrence(traj: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the first row of each distinct (trajectory, step), and each row's index into them."""
    seen: dict = {}
    inverse = np.fromiter((seen.setdefault((t, s), len(seen)) for t, s in zip(traj.tolist(), steps.tolist())),
                          dtype=np.int64, count=len(steps))
    first = np.zeros(len(seen), dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(steps))[::-1]
    return first, inverse


def _token_advantages(advantage: np.ndarray, like: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's advantage on every response token (Eq. 11: the step's A on all its tokens)."""
    return torch.as_tensor(advantage, dtype=like.dtype, device=like.device).unsqueeze(-1) * response_mask


def _registered(estimator: str):
    def estimate(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None,
                 non_tensor_batch: Mapping[str, np.ndarray] | None = None, **_unused):
        cols = (layout_columns(non_tensor_batch, estimator) if non_tensor_batch is not None
                else _columns_from_uids(index if index is not None else [], estimator))
        advantage, metrics = row_advantages(estimator, cols, config)
        _LAST["index"] = weakref.ref(index) if isinstance(index, np.ndarray) else None
        _LAST["metrics"] = metrics
        scores = _token_advantages(advantage, token_level_rewards, response_mask)
        return scores, scores

    estimate.__name__ = f"creditflow_{ESTIMATORS[estimator]}_advantage"
    estimate.__doc__ = f"creditflow's {ESTIMATORS[estimator]!r} estimator on verl-agent's row layout (docs/verl.md)."
    return estimate


def register() -> None:
    """Register creditflow's estimators in verl's advantage-estimator registry (idempotent)."""
    for name in ESTIMATORS:
        if name not in core_algos.ADV_ESTIMATOR_REGISTRY or not getattr(
                core_algos.ADV_ESTIMATOR_REGISTRY[name], "__name__", "").startswith("creditflow_"):
            core_algos.register_adv_est(name)(_registered(name))


def compute_advantage(data: DataProto, adv_estimator, config: Any = None) -> DataProto:
    """Advantages of creditflow estimator ``adv_estimator`` (a name in :data:`ESTIMATORS`) reading
    ``non_tensor_batch`` directly (no :func:`attach_rows` needed): for trainers with a ``compute_advantage``
    of their own (verl-agent's fork). Sets ``advantages`` and ``returns`` like verl's estimators."""
    name = getattr(adv_estimator, "value", adv_estimator)
    if name not in ESTIMATORS:
        raise VerlLayoutError(f"{name!r} is not a creditflow estimator; creditflow's: {', '.join(ESTIMATORS)}")
    if "response_mask" not in data.batch.keys():
        responses = data.batch["responses"]
        data.batch["response_mask"] = data.batch["attention_mask"][:, -responses.size(1):]
    scores, _ = core_algos.get_adv_estimator_fn(name)(
        token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch["uid"], config=config, non_tensor_batch=data.non_tensor_batch)
    data.batch["advantages"] = scores
    data.batch["returns"] = scores
    return data


# --------------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------------


def credit_metrics(data: DataProto) -> dict:
    """For verl's metrics dict (``metrics.update(credit_metrics(batch))`` after ``compute_advantage``): the
    group diagnostics of CRPS Eq. 14 (``groups/all_zero_frac``, ``groups/all_one_frac``,
    ``groups/entropy``) over the batch's trajectories, and the last creditflow estimator's metrics
    (RewardFlow's graph statistics: ``credit/graph_nodes``, ...) when it ran on this batch."""
    uid = data.non_tensor_batch["uid"]
    cols = (_columns_from_uids(uid, "metrics") if len(uid) and isinstance(uid[0], RowUid)
            else layout_columns(data.non_tensor_batch, "creditflow_grpo"))
    outcome: dict = {}
    for group, traj, won in zip(cols["group_ids"], cols["traj_ids"], np.asarray(cols["success"]).tolist()):
        outcome.setdefault(group, {})[traj] = won
    metrics = group_diagnostics([list(trajs.values()) for trajs in outcome.values()])
    last = _LAST["index"]() if _LAST["index"] is not None else None
    if last is uid:
        metrics.update({k: float(v) for k, v in _LAST["metrics"].items()})
    return metrics


# --------------------------------------------------------------------------------------------------
# DataProto <-> Trajectory
# --------------------------------------------------------------------------------------------------


def to_dataproto(trajectories: Sequence[Trajectory], *, attach: bool = True) -> DataProto:
    """A DataProto in verl-agent's layout from creditflow trajectories: one row per step, rows in input order
    (trajectory after trajectory, then step). Token tensors come from each step's ``prompt_ids`` /
    ``response_ids`` (right-padded with 0; one placeholder token where a step has none); the step's env
    reward sits on its last response token of ``token_level_rewards``. ``attach``: uids are
    :class:`RowUid` (:func:`attach_rows`)."""
    trajs = list(trajectories)
    traj_ids = [t.traj_id or f"{t.group_id}/{k}" for k, t in enumerate(trajs)]
    rows = [(t, i, s, tid) for t, tid in zip(trajs, traj_ids) for i, s in enumerate(t.steps)]
    prompts = _padded([s.prompt_ids for _, _, s, _ in rows], left=True)
    responses = _padded([s.response_ids for _, _, s, _ in rows], left=False)
    prompt_mask, response_mask = (prompts >= 0).long(), (responses >= 0).long()
    prompts, responses = prompts.clamp(min=0), responses.clamp(min=0)
    last = (response_mask.sum(-1) - 1).clamp(min=0)
    rewards = torch.zeros(responses.shape, dtype=torch.float32)
    rewards[torch.arange(len(rows)), last] = torch.tensor([s.reward for _, _, s, _ in rows], dtype=torch.float32)
    tensors = {"prompts": prompts, "responses": responses, "input_ids": torch.cat((prompts, responses), -1),
               "attention_mask": torch.cat((prompt_mask, response_mask), -1), "response_mask": response_mask,
               "token_level_scores": rewards, "token_level_rewards": rewards.clone()}
    obj = (lambda values: np.array(list(values), dtype=object))
    non_tensors = {
        "uid": obj(t.group_id for t, _, _, _ in rows),
        "traj_uid": obj(tid for _, _, _, tid in rows),
        "step_index": np.array([i for _, i, _, _ in rows], dtype=np.int64),
        "state_key": obj(s.state for _, _, s, _ in rows),
        "next_state_key": obj(_next_state(t, i) for t, i, _, _ in rows),
        "anchor_obs": obj(s.observation for _, _, s, _ in rows),
        "action": obj(s.action for _, _, s, _ in rows),
        "rewards": np.array([s.reward for _, _, s, _ in rows], dtype=np.float64),
        "is_action_valid": np.array([bool(s.valid) for _, _, s, _ in rows], dtype=bool),
        "active_masks": np.ones(len(rows), dtype=bool),
        "success": np.array([bool(t.success) for t, _, _, _ in rows], dtype=bool),
        "score": np.array([float(t.score) for t, _, _, _ in rows], dtype=np.float64),
    }
    data = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
    return attach_rows(data) if attach else data


def _next_state(traj: Trajectory, i: int) -> str | None:
    """s_{t+1} of step ``i`` as creditflow resolves it: recorded, the next step's state, or the final state."""
    step = traj.steps[i]
    if step.next_state:
        return step.next_state
    if i + 1 < len(traj.steps):
        return traj.steps[i + 1].state
    return traj.final_state or None


def _padded(seqs: Sequence[list[int] | None], left: bool) -> torch.Tensor:
    """(N, L) token ids, -1 where padded (a step without tokens gets one placeholder token 0)."""
    seqs = [list(s) if s else [0] for s in seqs]
    width = max((len(s) for s in seqs), default=1)
    out = torch.full((len(seqs), width), -1, dtype=torch.long)
    for row, s in enumerate(seqs):
        if left:
            out[row, width - len(s):] = torch.tensor(s)
        else:
            out[row, :len(s)] = torch.tensor(s)
    return out


def from_dataproto(data: DataProto) -> list[Trajectory]:
    """creditflow trajectories from a DataProto in verl-agent's layout (the reverse of :func:`to_dataproto`):
    rows grouped by ``traj_uid`` (in order of first appearance), steps by ``step_index``; inactive rows are
    left out. A step's ``advantage`` is the row's advantage where ``advantages`` were computed."""
    nt = data.non_tensor_batch
    uid = nt["uid"]
    cols = (_columns_from_uids(uid, "from_dataproto") if len(uid) and isinstance(uid[0], RowUid)
            else layout_columns(nt, "creditflow_grpo"))
    n = len(cols["group_ids"])
    mask = data.batch["response_mask"] if "response_mask" in data.batch.keys() else None
    first_token = mask.argmax(-1) if mask is not None else None
    adv = (data.batch["advantages"][torch.arange(n), first_token].tolist()
           if "advantages" in data.batch.keys() and mask is not None else [None] * n)
    actions = nt.get("action")
    by_traj: dict = {}
    for row in np.flatnonzero(np.asarray(cols["active"], dtype=bool)).tolist():
        by_traj.setdefault(cols["traj_ids"][row], []).append(row)
    out = []
    for traj_id, trows in by_traj.items():
        trows.sort(key=lambda r: int(cols["step_index"][r]))
        steps = [Step(state=str(cols["state_keys"][r]),
                      observation=str(cols["observations"][r]) if cols.get("observations") is not None else "",
                      action=str(actions[r]) if actions is not None else "",
                      valid=bool(cols["valid"][r]) if cols.get("valid") is not None else True,
                      reward=float(cols["rewards"][r]),
                      next_state=(cols["next_state_keys"][r] if cols.get("next_state_keys") is not None else None),
                      advantage=adv[r])
                 for r in trows]
        head = trows[0]
        out.append(Trajectory(task_id=cols["group_ids"][head], group_id=cols["group_ids"][head], traj_id=str(traj_id),
                              steps=steps, final_state=steps[-1].next_state or "",
                              success=bool(cols["success"][head]),
                              score=float(cols["scores"][head]) if cols.get("scores") is not None else 0.0))
    return out


register()

__all__ = ["ESTIMATORS", "RowUid", "VerlLayoutError", "attach_rows", "compute_advantage", "credit_metrics",
           "estimator_knobs", "from_dataproto", "layout_columns", "register", "row_advantages", "to_dataproto"]
