"""creditflow's per-step credit inside TRL's ``GRPOTrainer`` (TRL 1.16): one class to change.

``CreditGRPOTrainer`` is ``trl.GRPOTrainer`` with creditflow's estimators in place of TRL's one advantage per
sequence::

    trainer = CreditGRPOTrainer(model, reward_funcs, args=GRPOConfig(...), environment_factory=MyEnv,
                                estimator="rewardflow", credit_knobs={"gamma": 0.9})

Everything else is TRL's: generation (transformers or vLLM), the tool loop of ``environment_factory``,
``rollout_func``, the rewards, the loss variants (``loss_type``), accelerate / DeepSpeed and logging.

**Steps.** A TRL rollout is one token sequence: the prompt, then the completion, in which the assistant's turns
alternate with tool or environment tokens (``tool_mask`` / a ``rollout_func``'s ``env_mask`` = 0). Each run of
assistant tokens is one step; a completion without such a mask is one step. Step k of rollout i has

- its state s_k: ``environment.state_key()`` (or ``state_key_fn(environment)``) read when the turn is
  generated; a ``rollout_func`` returns ``state_keys`` (one per turn); with neither, the observation text;
- its observation: the decoded prompt for the first turn, the decoded tool/environment tokens before it
  for the others;
- its reward: TRL's reward of the rollout (the weighted sum of the reward functions, ``get_reward`` of an
  environment included) on the last step, 0 before it, so the return is TRL's reward; it is also the
  rollout's ``score``;
- the rollout's success: ``environment.success`` (an attribute or a method), a ``rollout_func``'s ``success``,
  else ``reward >= success_threshold`` when that is given. Estimators that need it (RewardFlow; any
  ``reward_source=success``) stop with one line naming the rollout when it is unknown.

Groups are TRL's: consecutive blocks of ``num_generations`` rollouts of the global batch (the same prompt),
so a prompt that occurs twice in a batch forms two groups. The hook is ``_generate_and_score_completions``
(TRL computes its advantages there): it builds the rows of the whole generation batch, gathered over the
processes as TRL gathers its rewards, as the :class:`~creditflow.credit.Rows` every bridge builds,
and takes their advantages and metrics from :func:`creditflow.integrations.rows.advantages` (the kernel every
public path runs, with the estimator's own defaults for the knobs not given); step k's advantage goes on
exactly the tokens of turn k, 0 elsewhere, as an advantages tensor of shape (B, T) that TRL's ``_compute_loss``
takes as it is.

**Options that cannot apply** (one line each, :data:`NOT_APPLICABLE`): ``scale_rewards`` other than its
default and ``multi_objective_aggregation="normalize_then_sum"`` turn rewards into one advantage per
sequence; the estimator's knobs do that here. Advantage-sign options (``off_policy_mask_threshold``,
``loss_type="sapo"`` / ``"vespo"``) read the advantage per token, so they act per turn (docs/trl.md).
"""

from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import torch
import trl
from accelerate.utils import gather_object
from packaging.version import Version
from trl import GRPOTrainer  # this module is the TRL bridge: TRL is its reason to exist

from creditflow.credit import Rows, estimator_names, estimator_needs, validate_knobs
from creditflow.curriculum.diagnostics import group_diagnostics
from creditflow.envs.adapters.trl_env import CREDITFLOW_READS, outcome_of
from creditflow.errors import UserError
from creditflow.integrations.rows import advantages
from creditflow.policy.load import DEPRECATIONS_OF_OTHERS

MIN_TRL = "1.16.0"  # the GRPOTrainer whose methods CreditGRPOTrainer extends (docs/trl.md)
if Version(trl.__version__) < Version(MIN_TRL):
    raise ImportError(f"creditflow.integrations.trl needs TRL >= {MIN_TRL} (the GRPOTrainer it extends); "
                      f"found {trl.__version__}")
ROLLOUT_FIELDS = ("state_keys", "success", "valid")  # what a rollout_func may return for creditflow
# environment members creditflow reads, which TRL would otherwise offer the model as tools (every public method is):
# the same the ``trl:`` env adapter keeps out of its tools, so one class behaves the same through both routes
CREDIT_METHODS = CREDITFLOW_READS
_OBSERVED = object()  # an environment without a state key: its turns' states are their observation texts

# TRL options whose non-default values turn rewards into one advantage per sequence: option -> (default, why)
NOT_APPLICABLE = {
    "scale_rewards": ("group", "the estimator normalises its advantages (credit_knobs: normalize_std / normalize, "
                               "ddof, eps)"),
    "multi_objective_aggregation": ("sum_then_normalize", "the estimator reads the summed reward and normalises "
                                                           "it itself"),
}


class TRLCreditError(UserError):
    """A TRL option or rollout that creditflow's credit cannot use, or a rollout without a state key or outcome."""


# --------------------------------------------------------------------------------------------------
# the pure part: turns, credit, placement
# --------------------------------------------------------------------------------------------------


def turn_spans(mask: Sequence[int] | None, length: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of assistant tokens (mask 1) in a completion of ``length`` tokens; no
    mask: the whole completion is one turn."""
    if mask is None:
        return [(0, length)] if length else []
    m = np.asarray(mask[:length], dtype=bool)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], m, [False])).astype(np.int8)))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


@dataclass
class Rollout:
    """One rollout as steps: the token span of each assistant turn in its completion, the state and
    observation before each turn, the outcome where known and the validity of each turn."""

    spans: list[tuple[int, int]]
    state_keys: list[Hashable]
    observations: list[str]
    success: bool | None = None
    valid: list[bool] | None = None


def needs_success(estimator: str, knobs) -> bool:
    """Whether the estimator reads the rollouts' success: one that declares it (RewardFlow's and GraphGPO's success
    terminals; unless their own ``success_threshold`` knob derives them from the score), or any
    ``reward_source=success``."""
    resolved = knobs.resolved()
    if "success" in estimator_needs(estimator) and getattr(resolved, "success_threshold", None) is None:
        return True
    return "success" in (getattr(resolved, "reward_source", None), getattr(resolved, "step_reward_source", None))


def rollout_credit(estimator: str, knobs: dict, rollouts: Sequence[Rollout], rewards: np.ndarray,
                   group_size: int) -> tuple[list[np.ndarray], dict]:
    """Per-step advantages of every rollout (a list of arrays, one value per turn) and the estimator's
    metrics. Rollout i is trajectory i of group ``i // group_size``; its reward sits on its last step."""
    advantage, metrics = advantages(estimator, rollout_columns(rollouts, rewards, group_size), knobs)
    ends = np.cumsum([len(r.spans) for r in rollouts])
    return np.split(advantage, ends[:-1]) if len(rollouts) else [], metrics


def rollout_columns(rollouts: Sequence[Rollout], rewards: np.ndarray, group_size: int) -> Rows:
    """The rows of the rollouts, one per turn, as the :class:`~creditflow.credit.Rows` every bridge
    builds: rollout i is trajectory i of group ``i // group_size``, its reward on its last step and its score."""
    group_ids, traj_ids, steps, keys, obs, step_rewards, success, valid, scores = ([] for _ in range(9))
    for i, r in enumerate(rollouts):
        n = len(r.spans)
        group_ids += [i // group_size] * n
        traj_ids += [i] * n
        steps += range(n)
        keys += r.state_keys
        obs += r.observations
        step_rewards += [0.0] * (n - 1) + [float(rewards[i])]
        success += [bool(r.success)] * n
        valid += r.valid if r.valid is not None else [True] * n
        scores += [float(rewards[i])] * n
    return Rows.filled(group_ids, traj_ids=traj_ids, step_index=steps, state_keys=keys, observations=obs,
                       rewards=step_rewards, success=success, valid=valid, scores=scores)


def place_advantages(step_advantages: Sequence[np.ndarray], spans: Sequence[list[tuple[int, int]]],
                     width: int) -> np.ndarray:
    """(B, width) float32: step k's advantage on the tokens of turn k of its rollout, 0 everywhere else."""
    out = np.zeros((len(spans), width), dtype=np.float32)
    for row, (adv, row_spans) in enumerate(zip(step_advantages, spans)):
        for a, (start, end) in zip(adv.tolist(), row_spans):
            out[row, start:end] = a
    return out


def check_options(args) -> None:
    """One line for the first TRL option set to a value that cannot apply with per-step credit."""
    for option, (default, why) in NOT_APPLICABLE.items():
        value = getattr(args, option, default)
        if value != default:
            raise TRLCreditError(f"GRPOConfig.{option}={value!r} does not apply with creditflow credit: {why}; "
                                 f"leave it at {default!r} (docs/trl.md)")


# --------------------------------------------------------------------------------------------------
# the trainer
# --------------------------------------------------------------------------------------------------


class CreditGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose advantages are creditflow's per-step credit (module docstring; docs/trl.md).

    Extra arguments: ``estimator`` (a registered name: rewardflow, gigpo, graphgpo, g2po, gagpo, grpo,
    rloo), ``credit_knobs`` (its knobs, ``creditflow credit --help``; every ``ddof`` defaults to 1, TRL's sample std, as everywhere in creditflow), ``state_key_fn`` (``fn(environment) ->
    state key``, for environments without a ``state_key()`` method) and ``success_threshold`` (success =
    TRL's reward >= this, where neither the environment nor the rollout_func gives ``success``).
    """

    def __init__(self, *args, estimator: str = "rewardflow", credit_knobs: dict | None = None,
                 state_key_fn: Callable[[Any], Hashable] | None = None, success_threshold: float | None = None,
                 **kwargs):
        self.set_credit(estimator, credit_knobs)  # one line for a bad name or knob, before any work
        if state_key_fn is not None and not callable(state_key_fn):
            raise TRLCreditError(f"state_key_fn must be a function of the environment, got {state_key_fn!r}")
        self.state_key_fn = state_key_fn
        self.success_threshold = success_threshold
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs)
        if bound.arguments.get("args") is not None:
            check_options(bound.arguments["args"])
        self._cf_gen = None
        self._cf_snapshots: list[list] | None = None
        self._cf_rewards = None
        self._cf_warned_observation = False
        warnings.filterwarnings("ignore", message=DEPRECATIONS_OF_OTHERS, category=FutureWarning)  # TRL's, 3x a step
        super().__init__(*args, **kwargs)
        check_options(self.args)
        self._hide_credit_methods()

    def set_credit(self, estimator: str, credit_knobs: dict | None = None) -> None:
        """Use ``estimator`` with ``credit_knobs`` from the next generation batch on (checked here)."""
        if estimator not in estimator_names():
            raise TRLCreditError(f"unknown estimator {estimator!r}; available: {', '.join(estimator_names())}")
        knobs = dict(credit_knobs or {})  # the estimator's own defaults: ddof=1 (TRL's sample std) everywhere
        resolved = validate_knobs(estimator, knobs)
        self.credit_estimator, self.credit_knobs = estimator, knobs
        self._cf_needs_success = needs_success(estimator, resolved)

    # -- what TRL produced, captured where it is produced ---------------------------------------------

    def _hide_credit_methods(self) -> None:
        """Take the environments' ``state_key`` / ``success`` / ``expert_actions`` methods out of the tools TRL shows
        the model."""
        if getattr(self, "environment_factories", None) is None:
            return
        self._env_tools = {name: [t for t in tools if not _credit_method(t)] for name, tools in self._env_tools.items()}
        self.tools = [t for t in self.tools if not _credit_method(t)]

    def _tool_call_loop(self, *args, **kwargs):
        # TRL builds each rollout's tool dispatch from every public method of its environment: not these
        for tool_dicts in (self._sync_tool_dicts, self._async_tool_dicts):
            for tools in tool_dicts:
                for name in [n for n, t in tools.items() if _credit_method(t)]:
                    del tools[name]
        return super()._tool_call_loop(*args, **kwargs)

    def _state_key_of(self, env) -> Hashable:
        """The state of ``env`` now: ``state_key_fn(env)``, else ``env.state_key()``, else :data:`_OBSERVED`."""
        if self.state_key_fn is not None:
            return self.state_key_fn(env)
        method = getattr(env, "state_key", None)
        return method() if callable(method) else _OBSERVED

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        # every generation round of the tool loop: rollout i's turn k is generated in round k, after the tools
        # of its turn k-1 ran, so the environments' states now are the states of this round's turns
        if self._cf_snapshots is not None and self.environments and self.rollout_func is None:
            self._cf_snapshots.append([self._state_key_of(env) for env in self.environments])
        return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    def _generate(self, prompts: list):
        self._cf_snapshots = []
        out = super()._generate(prompts)
        prompt_ids, completion_ids, tool_mask, _, _, extra_fields, _, _ = out
        self._cf_gen = (prompt_ids, completion_ids, tool_mask, dict(extra_fields))
        return out

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._cf_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._cf_rewards

    # -- the credit step ----------------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        t0 = time.perf_counter()
        mode = "train" if self.model.training else "eval"
        local = self._local_rollouts()
        rollouts = gather_object(local) if self.accelerator.num_processes > 1 else local
        rewards = self._rollout_rewards()
        self._fill_outcomes(rollouts, rewards)
        step_adv, metrics = rollout_credit(self.credit_estimator, self.credit_knobs, rollouts, rewards,
                                           self._group_size())
        first = self.accelerator.process_index * len(local)
        advantages = place_advantages(step_adv[first:first + len(local)], [r.spans for r in local],
                                      output["completion_ids"].size(1))
        output["advantages"] = torch.as_tensor(advantages, device=output["completion_ids"].device)
        self._log_credit(mode, rollouts, step_adv, metrics, (time.perf_counter() - t0) * 1000.0)
        return output

    def _local_rollouts(self) -> list[Rollout]:
        """This process's rollouts as steps, from what ``_generate`` returned and the state snapshots."""
        prompt_ids, completion_ids, tool_mask, extra = self._cf_gen
        offset = self.accelerator.process_index * len(completion_ids)
        decode = _Decoder(self.processing_class)
        field_keys, field_success, field_valid = (extra.get(name) for name in ROLLOUT_FIELDS)
        rounds = self._cf_snapshots or []
        out = []
        for i, ids in enumerate(completion_ids):
            mask = tool_mask[i] if tool_mask is not None else None
            spans = turn_spans(mask, len(ids))
            where = f"rollout {offset + i} (group {(offset + i) // self._group_size()})"
            if not spans:
                raise TRLCreditError(f"{where}: no assistant tokens (its env_mask/tool_mask is all 0)")
            observations = [decode(prompt_ids[i])] + [decode(ids[end:start]) for (_, end), (start, _)
                                                      in zip(spans, spans[1:])]
            if field_keys is not None:
                keys = _per_turn(field_keys[i], len(spans), "state key", where, "rollout_func's 'state_keys'")
            elif rounds and rounds[0][i] is not _OBSERVED:
                if len(rounds) < len(spans):
                    raise TRLCreditError(f"{where}: {len(spans)} assistant turns in its tool_mask but {len(rounds)} "
                                         "generation rounds of TRL's tool loop; cannot tell the turns' states")
                keys = [rounds[k][i] for k in range(len(spans))]
                bad = next((k for k, key in enumerate(keys) if key is None), None)
                if bad is not None:
                    source = "state_key_fn(environment)" if self.state_key_fn else "environment.state_key()"
                    raise TRLCreditError(f"{where}, turn {bad}: {source} returned None: every turn needs a state key "
                                         "(docs/trl.md)")
            else:  # no state key from the environment or the rollout_func: the observation text
                keys = observations
                self._warn_observation_states()
            valid = (None if field_valid is None
                     else [bool(v) for v in _per_turn(field_valid[i], len(spans), "validity flag", where,
                                                      "rollout_func's 'valid'")])
            success = None
            if field_success is not None and field_success[i] is not None:
                success = bool(field_success[i])
            elif self.environments and hasattr(self.environments[i], "success"):
                success = outcome_of(self.environments[i])  # as the trl: env adapter reads it
            out.append(Rollout(spans=spans, state_keys=keys, observations=observations, success=success, valid=valid))
        return out

    def _warn_observation_states(self) -> None:
        """Once per trainer: an estimator that groups states gets the observation text as the state (docs/trl.md)."""
        if self._cf_warned_observation or "state" not in estimator_needs(self.credit_estimator):
            return
        self._cf_warned_observation = True
        source = ("the rollout_func returned no 'state_keys'" if self.rollout_func is not None
                  else "the environment has no state_key() and no state_key_fn was given")
        warnings.warn(f"{self.credit_estimator}: {source}, so turns are grouped by their observation text; "
                      "give each turn a state key for state groups that mean the same state (docs/trl.md)",
                      UserWarning, stacklevel=2)

    def _group_size(self) -> int:
        """Rollouts per group: TRL's ``num_generations`` (``num_generations_eval`` in evaluation)."""
        return self.num_generations if self.model.training else self.num_generations_eval

    def _rollout_rewards(self) -> np.ndarray:
        """TRL's reward of every rollout of the global batch (reward functions weighted and summed as TRL sums
        them); a rollout that no reward function scored is one error."""
        per_func = self._cf_rewards
        weighted = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        unscored = torch.isnan(per_func).all(dim=1)
        if bool(unscored.any()):
            i = int(torch.nonzero(unscored)[0])
            raise TRLCreditError(f"rollout {i} (group {i // self._group_size()}): no outcome: every reward function "
                                 "returned None, so it has no reward (docs/trl.md)")
        return weighted.double().cpu().numpy()

    def _fill_outcomes(self, rollouts: list[Rollout], rewards: np.ndarray) -> None:
        """Success from the threshold where the rollout has none; one error where the estimator needs it."""
        for i, r in enumerate(rollouts):
            if r.success is None and self.success_threshold is not None:
                r.success = bool(rewards[i] >= self.success_threshold)
            if r.success is None and self._cf_needs_success:
                raise TRLCreditError(
                    f"rollout {i} (group {i // self._group_size()}): no outcome 'success', which "
                    f"{self.credit_estimator!r} needs: give the environment a 'success' attribute, return 'success' "
                    "from the rollout_func, or pass success_threshold= (docs/trl.md)")

    def _log_credit(self, mode: str, rollouts: list[Rollout], step_adv: list[np.ndarray], metrics: dict,
                    credit_ms: float) -> None:
        """Group diagnostics and the estimator's metrics under docs/metrics.md's names; the completions table's
        advantage column: each rollout's mean over its turns, the turns' own in ``turn_advantages``."""
        logged = self._metrics[mode]
        if all(r.success is not None for r in rollouts):
            size = self._group_size()
            groups = [[r.success for r in rollouts[g:g + size]] for g in range(0, len(rollouts), size)]
            for key, value in group_diagnostics(groups).items():
                logged[key].append(float(value))
        for key, value in metrics.items():
            logged[key].append(float(value))
        logged["time/credit_ms"].append(credit_ms)
        table = self._logs["advantages"]
        n = len(step_adv)
        if len(table) >= n:
            for j, adv in enumerate(step_adv):
                table[len(table) - n + j] = float(adv.mean())
            self._logs["extra"]["turn_advantages"].extend([[round(a, 4) for a in adv.tolist()] for adv in step_adv])


def _credit_method(tool) -> bool:
    """An environment's bound ``state_key`` / ``success`` / ``expert_actions`` method (not a standalone tool of that
    name)."""
    return getattr(tool, "__name__", None) in CREDIT_METHODS and getattr(tool, "__self__", None) is not None


def _per_turn(values, n: int, what: str, where: str, source: str) -> list:
    """A rollout_func's per-turn list, exactly one entry per turn, none of them None."""
    if not isinstance(values, (list, tuple)) or len(values) != n:
        got = f"{len(values)} entries" if isinstance(values, (list, tuple)) else type(values).__name__
        raise TRLCreditError(f"{where}: {source} needs one entry per turn ({n} turns), got {got} (docs/trl.md)")
    bad = next((k for k, v in enumerate(values) if v is None), None)
    if bad is not None:
        raise TRLCreditError(f"{where}, turn {bad}: {source} is None: every turn needs a {what} (docs/trl.md)")
    return list(values)


class _Decoder:
    """Token ids -> text, each distinct sequence decoded once per batch (the rollouts of a group share a prompt)."""

    def __init__(self, processing_class):
        self.tokenizer = getattr(processing_class, "tokenizer", processing_class)
        self.cache: dict[tuple, str] = {}

    def __call__(self, ids) -> str:
        key = tuple(ids)
        if key not in self.cache:
            self.cache[key] = self.tokenizer.decode(list(key), skip_special_tokens=False)
        return self.cache[key]


__all__ = ["CreditGRPOTrainer", "NOT_APPLICABLE", "Rollout", "TRLCreditError", "check_options",
           "needs_success", "place_advantages", "rollout_columns", "rollout_credit", "turn_spans"]
