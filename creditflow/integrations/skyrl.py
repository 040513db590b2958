"""creditflow's estimators in SkyRL (the ``skyrl`` package, 0.4): registered advantage estimators, and per-step
credit in SkyRL's step-wise training mode (``generator.step_wise_trajectories=true``).

**SkyRL's step-wise data path.** The generator emits one row per turn: the turn's prompt (the whole
conversation so far), its response (the model's tokens, loss mask 1, then the env's reply, loss mask 0),
the step's env reward on its last response token, ``trajectory_ids`` and ``is_last_step``.
``convert_to_training_input`` keeps ``metadata["uids"]`` (the instance ids) and ``metadata["is_last_step"]``, in
the generator's order (a trajectory's steps in a row, its last one flagged). The trainer's
``compute_advantages_and_returns`` (``skyrl.train.trainer.RayPPOTrainer``) hands only the last-step rows to the
registered estimator, with an all-ones mask, and broadcasts each trajectory's scalar to every step's response
mask: every registered estimator, per-step ones included, gives a trajectory one advantage there.

**The route.** :func:`register` registers every creditflow estimator
(:data:`~creditflow.integrations.rows.ESTIMATORS`: ``rewardflow``, ``gigpo``, ``graphgpo``, ``g2po``,
``gagpo``, ``creditflow_grpo``, ``creditflow_rloo``, and any estimator registered since) in ``AdvantageEstimatorRegistry``
(``grpo``/``rloo`` stay SkyRL's), so that SkyRL's ``validate_cfg`` knows their names; ``skyrl_main`` calls it.
The registered estimators need the step rows, which SkyRL's trainer never passes them:
:class:`CreditflowAdvantage`, a mixin for ``RayPPOTrainer``, overrides ``compute_advantages_and_returns``
(SkyRL's advantage hook) for these names alone. It builds the rows of every step from the batch
(:meth:`~CreditflowAdvantage.creditflow_columns`; step-wise: all steps, not only the last), takes their
advantages and the estimator's metrics from :func:`~creditflow.integrations.rows.advantages`, and puts each
step's advantage on the tokens of its loss mask (the model's tokens: never the env's reply, the prompt or
SkyRL's padding rows), as the registered estimator would (:class:`SkyRLEstimator`): SkyRL's
``ppo_utils.compute_advantages_and_returns`` is nothing but the registry's dispatch, so the hook runs the
estimator's code itself. Any other estimator runs SkyRL's method unchanged. ``python -m
creditflow.integrations.skyrl_main`` is SkyRL's ``main_base`` with this trainer and
:class:`CreditflowAlgorithmConfig` (``trainer.algorithm.creditflow.*``).

**Rows.** Group: the instance uid. Trajectory: step-wise, the rows up to and including the next
``is_last_step`` (SkyRL's own rule); else each row. Step: the row's position in its trajectory. Env reward: the
row's reward sum. Outcome: the trajectory's last-step reward, as SkyRL's own GRPO reads it there (``score``;
``success`` when it is above 0). State: the observation the step answers, i.e. the env's reply at the end of
the previous step's response (its token ids), or the prompt at step 0; override
:meth:`~CreditflowAdvantage.creditflow_states` for envs whose observation is not their state. Knobs come
from ``trainer.algorithm.creditflow`` (``trainer.algorithm.creditflow.gamma=0.9``); ``ddof`` defaults to
1, SkyRL's std.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch
# this module is the SkyRL bridge: skyrl is its reason to exist
from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry
from skyrl.train.config import AlgorithmConfig, make_config
from skyrl.train.trainer import RayPPOTrainer

from creditflow.credit import Rows
from creditflow.credit.rows import row_order
from creditflow.integrations.rows import (ESTIMATORS, LayoutError, advantages, call_of, estimate_call, estimator_knobs,
                                          group_metrics, uids_from_rows)

NO_ROWS = ("SkyRL's trainer passes estimators only the uids (and in step-wise mode only the last steps): run it "
           "through creditflow's trainer, python -m creditflow.integrations.skyrl_main or a RayPPOTrainer subclass "
           "with creditflow.integrations.skyrl.CreditflowAdvantage first (docs/skyrl.md)")
MERGED = ("generator.merge_stepwise_output=true merges a trajectory's turns into one row, so its steps no longer "
          "have rows of their own; creditflow's estimators need one row per step: set it to false (docs/skyrl.md)")


@dataclass
class CreditflowAlgorithmConfig(AlgorithmConfig):
    """SkyRL's ``AlgorithmConfig`` with ``creditflow``: the knobs of creditflow's estimator
    (``trainer.algorithm.creditflow.gamma=0.9``; ``creditflow credit --help`` lists them)."""

    creditflow: dict = field(default_factory=dict)


# SkyRL's config with trainer.algorithm a CreditflowAlgorithmConfig (SkyRL's make_config, for custom algorithms)
CreditflowSkyRLTrainConfig = make_config(algorithm_cls=CreditflowAlgorithmConfig)


class SkyRLEstimator:
    """creditflow's estimator ``name`` (a trainer name, :data:`~creditflow.integrations.rows.ESTIMATORS`) as SkyRL
    calls a registered advantage estimator: the rows from :func:`~creditflow.integrations.rows.call_of`, each
    row's advantage on its loss mask. An object of this module's class, so that SkyRL's registry actor
    (cloudpickle) and Ray workers rebuild it by name."""

    def __init__(self, name: str):
        self.name = name
        self.__name__ = self.__qualname__ = f"creditflow_{ESTIMATORS.get(name, name)}_advantage"
        self.__doc__ = f"creditflow's {ESTIMATORS.get(name, name)!r} estimator on SkyRL's step rows (docs/skyrl.md)."

    def __eq__(self, other) -> bool:
        return isinstance(other, SkyRLEstimator) and other.name == self.name

    def __hash__(self) -> int:
        return hash((SkyRLEstimator, self.name))

    def __repr__(self) -> str:
        return f"SkyRLEstimator({self.name!r})"

    def __call__(self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None,
                 loss_mask: torch.Tensor | None = None, **_unused):
        advantage = estimate_call(self.name, call_of(index if index is not None else [], self.name, NO_ROWS), config)
        scores = _on_tokens(advantage, token_level_rewards, response_mask if loss_mask is None else loss_mask)
        return scores, scores


def _on_tokens(advantage: np.ndarray, like: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's advantage on the tokens of ``mask`` (the loss mask: the model's tokens), 0 elsewhere."""
    return torch.as_tensor(advantage, dtype=like.dtype, device=like.device).unsqueeze(-1) * mask.to(like.dtype)


def register() -> None:
    """Register creditflow's estimators (every name of :data:`~creditflow.integrations.rows.ESTIMATORS`, so also
    any estimator registered since the last call) in SkyRL's ``AdvantageEstimatorRegistry`` (idempotent)."""
    available = set(AdvantageEstimatorRegistry.list_available())
    for name in ESTIMATORS:
        if name not in available:
            AdvantageEstimatorRegistry.register(name, SkyRLEstimator(name))


def _key(tokens: list[int]) -> str:
    """A short state key for a token sequence (128-bit digest of its ids)."""
    return "tokens:" + hashlib.blake2b(np.asarray(tokens, dtype=np.int64).tobytes(), digest_size=16).hexdigest()


class CreditflowAdvantage:
    """Mixin for SkyRL's ``RayPPOTrainer``: creditflow's estimators get every step's row and put each step's
    advantage on its own model tokens (module docstring); every other estimator is SkyRL's."""

    def compute_advantages_and_returns(self, data):
        name = str(self.cfg.trainer.algorithm.advantage_estimator)
        if name not in ESTIMATORS:
            return super().compute_advantages_and_returns(data)
        if getattr(self.cfg.generator, "merge_stepwise_output", False):
            raise LayoutError(MERGED)
        rows = self.creditflow_columns(data)
        advantage, found = advantages(name, rows, estimator_knobs(name, self.cfg.trainer.algorithm))
        scores = _on_tokens(advantage, data["rewards"], data["loss_mask"])
        data["advantages"], data["returns"] = scores, scores
        self._creditflow_metrics(data, rows, found)
        return data

    def creditflow_rows(self, data) -> np.ndarray:
        """The :class:`~creditflow.integrations.rows.RowUid` of every row (:meth:`creditflow_columns`, carried by the
        group ids: for a SkyRL path that calls the registered estimator itself, under
        :func:`~creditflow.integrations.rows.attached`)."""
        return uids_from_rows(self.creditflow_columns(data))

    def creditflow_columns(self, data) -> Rows:
        """The :class:`~creditflow.credit.Rows` of a SkyRL ``TrainingInputBatch``, one per step (module docstring);
        SkyRL's padding rows (the last ``metadata["pad_size"]``) are inactive."""
        uids = [str(u) for u in data.metadata["uids"]]
        n = len(uids)
        pad = int(data.metadata.get("pad_size", 0) or 0)
        active = np.arange(n) < n - pad
        last = data.metadata.get("is_last_step")
        step_wise = bool(self.cfg.generator.step_wise_trajectories)
        if step_wise and last is None:
            raise LayoutError("SkyRL batch: step-wise training, but its metadata has no is_last_step")
        last = np.ones(n, dtype=bool) if not step_wise else np.asarray(list(last), dtype=bool)
        if len(last) != n:
            raise LayoutError(f"SkyRL batch: {n} uids and {len(last)} is_last_step flags")
        # SkyRL's own rule (its step-wise branch): a trajectory is the rows up to and including its last step
        index = np.concatenate([[0], np.cumsum(last[:-1])]).astype(np.int64) if n else np.zeros(0, np.int64)
        traj_ids = [f"{uids[row]}#{index[row]}" for row in range(n)]
        broken = next((row for row in range(1, n - pad) if index[row] == index[row - 1] and uids[row] != uids[row - 1]),
                      None)
        if broken is not None:  # a trajectory's rows all answer one instance: a last step went unflagged
            raise LayoutError(f"SkyRL batch: row {broken} continues the trajectory of row {broken - 1} (no "
                              f"is_last_step between them) but belongs to instance {uids[broken]!r}, not "
                              f"{uids[broken - 1]!r}")
        if step_wise and n - pad > 0 and not last[n - pad - 1]:
            raise LayoutError(f"SkyRL batch: trajectory {traj_ids[n - pad - 1]!r} has no row with is_last_step "
                              "(its outcome)")
        steps = row_order(traj_ids)
        rewards = data["rewards"].sum(-1).double().cpu().numpy()
        final = {traj_ids[row]: rewards[row] for row in range(n) if active[row] and last[row]}
        score = np.array([final.get(t, 0.0) for t in traj_ids])
        states = self.creditflow_states(data, traj_ids, steps)
        return Rows.filled(uids, traj_ids=traj_ids, step_index=steps, state_keys=states, rewards=rewards,
                           success=score > 0, scores=score, active=active)

    def creditflow_states(self, data, traj_ids: list[str], steps: np.ndarray) -> list[str]:
        """The state key of each row: the observation the step answers. Step 0: its prompt; step t: the env's
        reply closing step t-1's response (its loss-mask-0 tail). Override for envs whose observation is
        not their state."""
        width = data["response_mask"].shape[1]
        sequences = data["sequences"].cpu()
        attention = data["attention_mask"].bool().cpu()
        response_mask = data["response_mask"].bool().cpu()
        loss_mask = data["loss_mask"].bool().cpu()
        previous: dict = {}
        states = []
        for row, (traj, step) in enumerate(zip(traj_ids, steps.tolist())):
            if step == 0 or traj not in previous:  # the row's real tokens but its response (SkyRL 0.4 lays a
                tokens = sequences[row][attention[row]]  # row out as one left-padded block: prompt, response)
                states.append(_key(tokens[:len(tokens) - int(response_mask[row].sum())].tolist()))
            else:
                states.append(previous[traj])
            response = sequences[row, -width:][response_mask[row]]
            model = loss_mask[row][response_mask[row]]
            tail = len(model) - (int(model.flip(0).int().argmax()) if model.any() else len(model))
            previous[traj] = _key(response[tail:].tolist())
        return states

    def _creditflow_metrics(self, data, rows: Rows, found: dict) -> None:
        """The credit metrics (the group diagnostics and the estimator's ``found``) in SkyRL's step metrics, and
        SkyRL's advantage statistics under its own names."""
        n = rows.n - int(data.metadata.get("pad_size", 0) or 0)
        mask = data["loss_mask"][:n].bool()
        values = data["advantages"][:n][mask]
        last = data.metadata.get("is_last_step") if self.cfg.generator.step_wise_trajectories else None
        finals = (data["rewards"][:n].sum(-1)[torch.as_tensor(list(last[:n]), dtype=torch.bool)] if last is not None
                  else data["rewards"][:n].sum(-1))
        stats = {"avg_final_rewards": float(finals.mean()) if len(finals) else 0.0,
                 "avg_response_length": data.metadata.get("avg_response_length", 0.0),
                 "avg_advantages": float(values.mean()) if len(values) else 0.0,
                 "avg_advantages_abs": float(values.abs().mean()) if len(values) else 0.0}
        data.metadata.setdefault("metrics", {}).update(stats)
        self.all_metrics.update({"loss/avg_final_rewards": stats["avg_final_rewards"],
                                 "loss/avg_raw_advantages": stats["avg_advantages"],
                                 "loss/avg_raw_advantages_abs": stats["avg_advantages_abs"]})
        self.all_metrics.update(group_metrics(rows))
        self.all_metrics.update({k: float(v) for k, v in found.items()})


class CreditflowRayPPOTrainer(CreditflowAdvantage, RayPPOTrainer):
    """SkyRL's ``RayPPOTrainer`` whose creditflow estimators get every step's row (docs/skyrl.md)."""


__all__ = ["CreditflowAdvantage", "CreditflowAlgorithmConfig", "CreditflowRayPPOTrainer", "CreditflowSkyRLTrainConfig",
           "MERGED", "NO_ROWS", "SkyRLEstimator", "register"]
