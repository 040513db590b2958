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

- v1 trainer (``trainer.use_v1=True``, verl 0.9's default): :mod:`creditflow.integrations.verl_v1` overrides
  the trainer's ``_compute_advantage`` hook, builds the rows from the agent loop's ``extra_fields`` and the
  output keys, and runs verl's own method with them :func:`attached` (the route every bridge takes,
  :mod:`creditflow.integrations.rows`).
- Legacy trainer (``trainer.use_v1=False``): its ``fit`` calls the module-level ``compute_advantage``, with no
  method to override, so the rows travel in the ``uid`` itself: :func:`attach_rows` (one line where the rollout
  batch is assembled) replaces each ``uid`` by its :class:`RowUid`, the same string (equal, same hash: every
  verl estimator groups as before) carrying its row's fields. It travels with the row through ``reorder``,
  ``select_idxs``, ``concat`` and Ray (pickled with its fields). A trainer that calls a ``compute_advantage``
  of its own (verl-agent's fork) can instead call :func:`compute_advantage` here, which reads
  ``non_tensor_batch`` directly.

Rows duplicated to pad the batch (verl-agent's ``adjust_batch``) share their original's advantage.

**Registration.** :func:`register` registers every creditflow estimator (:data:`ESTIMATORS`: ``rewardflow``,
``gigpo``, ``graphgpo``, ``g2po``, ``gagpo``, ``creditflow_grpo``, ``creditflow_rloo``, and any estimator
registered since) with ``verl.trainer.ppo.core_algos.register_adv_est``; creditflow's ``verl.plugins`` entry point
(:mod:`creditflow.integrations.verl_plugin`) calls it on ``import verl`` in every process. ``grpo``/``rloo`` are
verl's own names (``compute_advantage`` dispatches ``grpo`` before the registry), hence the prefix. Knobs come
from ``algorithm.creditflow`` (e.g. ``+algorithm.creditflow.gamma=0.9``); ``ddof`` defaults to verl's
convention, 1 (sample std), for every estimator that divides by a std.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from verl import DataProto  # this module is the verl bridge: verl is its reason to exist
from verl.trainer.ppo import core_algos

from creditflow.credit import Rows, estimator_needs
from creditflow.errors import UserError
from creditflow.integrations import plugins
from creditflow.integrations.rows import (ESTIMATORS, LayoutError, RowUid, advantages, attached, call_of, estimate_call,
                                          estimator_knobs, group_metrics, row_metrics, rows_from_uids, uids_from_rows)
from creditflow.rollout.trajectory import Step, Trajectory

# the fields of a row's state (creditflow's state key, else the observation) and outcome, in order of preference:
# the same names in the legacy layout (non_tensor_batch) and the v1 one (extra_fields)
STATE_KEYS = ("state_key", "anchor_obs")
SUCCESS_KEYS = ("success", "won")
VerlLayoutError = LayoutError  # a verl batch that lacks a field of the row layout
METRICS = "creditflow_metrics"  # meta_info key of the estimator's metrics, set by compute_advantage
NO_ROWS = ("with verl's legacy trainer call creditflow.integrations.verl.attach_rows(batch) where the rollout batch "
           "is assembled (or creditflow.integrations.verl.compute_advantage); with the v1 trainer "
           "(trainer.use_v1=True) creditflow's plugin creditflow_v1 attaches them, and it is not loaded here (it "
           "needs transfer_queue; VERL_USE_EXTERNAL_PLUGINS must allow it) (docs/verl.md)")


# --------------------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------------------


def layout_columns(non_tensor_batch: Mapping[str, np.ndarray], estimator: str = "rewardflow") -> Rows:
    """The :class:`~creditflow.credit.Rows` of a verl-agent ``non_tensor_batch`` (see the module docstring); a
    missing key is one :class:`VerlLayoutError` naming it."""
    n = len(_need(non_tensor_batch, "uid", estimator, "the group of each row"))
    get = non_tensor_batch.get
    state_key = next((k for k in STATE_KEYS if k in non_tensor_batch), None)
    if state_key is None and "state" in estimator_needs(ESTIMATORS.get(estimator, estimator)):
        raise VerlLayoutError(f"verl batch for {estimator!r}: non_tensor_batch has no 'anchor_obs' (or "
                              "'state_key'): the state of each row, which it needs (docs/verl.md)")
    success_key = next((k for k in SUCCESS_KEYS if k in non_tensor_batch), None)
    if success_key is None:
        raise VerlLayoutError(f"verl batch for {estimator!r}: non_tensor_batch has no 'success' (or 'won'): the "
                              "episode outcome of each row (docs/verl.md)")
    traj = _need(non_tensor_batch, "traj_uid", estimator, "the trajectory of each row")
    return Rows.filled([str(u) for u in non_tensor_batch["uid"]], traj_ids=list(traj), step_index=get("step_index"),
                       state_keys=list(non_tensor_batch[state_key]) if state_key else [""] * n,
                       next_state_keys=get("next_state_key"), observations=get("anchor_obs"),
                       rewards=_need(non_tensor_batch, "rewards", estimator, "the env reward of each step"),
                       success=np.asarray(non_tensor_batch[success_key]).astype(bool), valid=get("is_action_valid"),
                       active=get("active_masks"), scores=get("score"))


def _need(batch: Mapping[str, np.ndarray], key: str, estimator: str, what: str) -> np.ndarray:
    if key not in batch:
        raise VerlLayoutError(f"verl batch for {estimator!r}: non_tensor_batch has no {key!r}: {what} (docs/verl.md)")
    return batch[key]


def row_uids(non_tensor_batch: Mapping[str, np.ndarray], estimator: str = "rewardflow") -> np.ndarray:
    """The :class:`RowUid` of every row of a batch in the layout (see the module docstring): its ``uid``
    carrying the row's fields."""
    return uids_from_rows(layout_columns(non_tensor_batch, estimator))


def attach_rows(data: DataProto, estimator: str = "rewardflow") -> DataProto:
    """Replace ``non_tensor_batch["uid"]`` by :class:`RowUid` values carrying each row's layout fields, so that
    verl's own ``compute_advantage`` can run creditflow's registered estimators. Call it where the rollout
    batch is assembled (before ``balance_batch`` reorders rows, when there is no ``step_index``)."""
    data.non_tensor_batch["uid"] = row_uids(data.non_tensor_batch, estimator)
    return data


# --------------------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------------------


def _token_advantages(advantage: np.ndarray, like: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's advantage on every response token (Eq. 11: the step's A on all its tokens)."""
    return torch.as_tensor(advantage, dtype=like.dtype, device=like.device).unsqueeze(-1) * response_mask


class VerlEstimator:
    """creditflow's estimator ``name`` (a trainer name, :data:`ESTIMATORS`) as verl calls a registered advantage
    estimator: the rows from :func:`~creditflow.integrations.rows.call_of`, each row's advantage on its response
    tokens. An object, not a generated function: it pickles by its name, and two of the same name are equal
    (registering again is a no-op)."""

    def __init__(self, name: str):
        self.name = name
        self.__name__ = f"creditflow_{ESTIMATORS.get(name, name)}_advantage"
        self.__doc__ = (f"creditflow's {ESTIMATORS.get(name, name)!r} estimator on verl-agent's row layout "
                        "(docs/verl.md).")

    def __eq__(self, other) -> bool:
        return isinstance(other, VerlEstimator) and other.name == self.name

    def __hash__(self) -> int:
        return hash((VerlEstimator, self.name))

    def __repr__(self) -> str:
        return f"VerlEstimator({self.name!r})"

    def __call__(self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None,
                 **_unused):
        advantage = estimate_call(self.name, call_of(index if index is not None else [], self.name, NO_ROWS), config)
        scores = _token_advantages(advantage, token_level_rewards, response_mask)
        return scores, scores


def register() -> None:
    """Register creditflow's estimators (every name of :data:`ESTIMATORS`, so also any estimator registered since
    the last call) in verl's advantage-estimator registry (idempotent; creditflow's ``verl.plugins`` entry point
    calls it on ``import verl``). A name that verl's registry holds for another function already (another plugin's)
    is left to it, the others are registered, and one :class:`~creditflow.errors.UserError` names the taken ones."""
    taken = []
    for name in ESTIMATORS:
        if not isinstance(core_algos.ADV_ESTIMATOR_REGISTRY.get(name), VerlEstimator):
            try:
                core_algos.register_adv_est(name)(VerlEstimator(name))
            except ValueError:  # verl: "Adv estimator X has already been registered"
                taken.append(name)
    if taken:
        owners = ", ".join(f"{n!r} ({getattr(core_algos.ADV_ESTIMATOR_REGISTRY[n], '__module__', '?')})" for n in taken)
        raise UserError(f"verl's advantage-estimator registry already holds another estimator under {owners}: "
                        "creditflow's of that name is not registered (the others are)")


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
    advantage, found = advantages(name, layout_columns(data.non_tensor_batch, name), estimator_knobs(name, config))
    scores = _token_advantages(advantage, data.batch["token_level_rewards"], data.batch["response_mask"])
    data.batch["advantages"] = scores
    data.batch["returns"] = scores
    data.meta_info[METRICS] = found  # for credit_metrics(data): the batch carries them
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
    if len(uid) and isinstance(uid[0], RowUid):
        return row_metrics(uid)
    out = group_metrics(layout_columns(data.non_tensor_batch, "creditflow_grpo"))
    out.update({k: float(v) for k, v in data.meta_info.get(METRICS, {}).items()})
    return out


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
    rows = rows_from_uids(uid) if len(uid) and isinstance(uid[0], RowUid) else layout_columns(nt, "creditflow_grpo")
    n = rows.n
    mask = data.batch["response_mask"] if "response_mask" in data.batch.keys() else None
    first_token = mask.argmax(-1) if mask is not None else None
    adv = (data.batch["advantages"][torch.arange(n), first_token].tolist()
           if "advantages" in data.batch.keys() and mask is not None else [None] * n)
    actions = nt.get("action")
    by_traj: dict = {}
    for row in np.flatnonzero(np.asarray(rows.active, dtype=bool)).tolist():
        by_traj.setdefault(rows.traj_ids[row], []).append(row)
    out = []
    for traj_id, trows in by_traj.items():
        trows.sort(key=lambda r: int(rows.step_index[r]))
        steps = [Step(state=str(rows.state_keys[r]),
                      observation=str(rows.observations[r]) if rows.observations is not None else "",
                      action=str(actions[r]) if actions is not None else "",
                      valid=bool(rows.valid[r]) if rows.valid is not None else True,
                      reward=float(rows.rewards[r]),
                      next_state=(rows.next_state_keys[r] if rows.next_state_keys is not None else None),
                      advantage=adv[r])
                 for r in trows]
        head = trows[0]
        out.append(Trajectory(task_id=rows.group_ids[head], group_id=rows.group_ids[head], traj_id=str(traj_id),
                              steps=steps, final_state=steps[-1].next_state or "",
                              success=bool(rows.success[head]),
                              score=float(rows.scores[head]) if rows.scores is not None else 0.0))
    return out


__all__ = ["ESTIMATORS", "STATE_KEYS", "SUCCESS_KEYS", "RowUid", "VerlEstimator", "VerlLayoutError", "attach_rows",
           "attached", "compute_advantage", "credit_metrics", "estimator_knobs", "from_dataproto", "layout_columns",
           "register", "row_advantages", "row_metrics", "row_uids", "to_dataproto"]


def __getattr__(name: str):
    if name == "row_advantages":  # deprecated (one release): rows.row_advantages, which warns when called
        from creditflow.integrations import rows as row_bridge  # the alias lives there; nothing imports it eagerly
        return row_bridge.row_advantages
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


plugins.imported(__name__)  # the last line: a verl.plugins registration that waited for this module runs now
