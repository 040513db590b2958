"""Run configuration: pydantic models, loaded from YAML plus ``key=value`` overrides.

``creditflow train --config run.yaml rl.lr=1e-5 rollout.group_size=8 env.kwargs.size=7``. Every field has a
docstring; defaults are the papers' values where a paper fixes one (cited) and small CPU-friendly
values where the setting is only about budget.

Every number is checked before any work: floats must be finite (no NaN or infinity) and every numeric
field declares its meaningful range in its ``Field`` (``ge``/``gt``/``le``/``lt``/``multiple_of``), so the
schema carries it (``creditflow config`` shows it). A bool is no number (``rl.steps=true`` is an error).
Seeds are integers in ``[0, SEED_MAX]``: NumPy's global seed takes 32 bits, and the trainer adds the
process rank.
"""

from __future__ import annotations

import os
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from creditflow.atomic import write_atomic
from creditflow.errors import UserError, did_you_mean


SEED_MAX = 2**31 - 1
"""Largest seed or seed offset (a run seeds NumPy with ``seed + rank``, which must stay below 2**32)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True,
                              allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """``true``/``false`` given for a numeric field is an error (pydantic would read it as 1/0)."""
        if isinstance(value, bool) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError("expects a number, not true or false")
        return value


def _numeric(annotation: Any) -> bool:
    """An ``int``/``float`` field, optional or not (bool excluded)."""
    args = typing.get_args(annotation) if typing.get_origin(annotation) is Union else (annotation,)
    return any(a in (int, float) for a in args)


class EnvConfig(_Section):
    name: str = "sokoban"
    """The env: a built-in or plug-in name (``creditflow envs`` lists them), ``<adapter>:<spec>``, or
    ``module:Class`` (docs/environments.md, "Your own environment")."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor options of the env, e.g. ``{size: 6, num_boxes: 1}``."""
    eval_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra options for held-out evaluation envs (``split: test`` is added automatically when the env
    has a ``split`` option)."""
    eval_seed_offset: int = Field(1_000_000, ge=1, le=SEED_MAX)
    """Validation seeds are ``eval_seed_offset + i``; training seeds are drawn below it. The validation split is
    what every choice is made on (``rl.eval_every`` curves, sweeps); docs/environments.md "Evaluation splits"."""
    train_pool: int = Field(0, ge=0)
    """0: every RL step draws fresh training tasks (seeds below ``eval_seed_offset``). N > 0: a fixed pool of N
    tasks, the first N validation seeds (``eval_seed_offset + i``, i < N); every step draws its tasks from them
    (without replacement within a step, as the audit's tabular race), so the validation evaluation with
    ``rl.eval_episodes=N`` scores the policy on the very tasks it trains on: a learning race on a pool
    (``benchmarks/lm_race.py``), not a held-out number. The test split stays held out. At least
    ``rollout.tasks_per_step``."""
    test_seed_offset: int = Field(2_000_000, ge=1, le=SEED_MAX)
    """Test seeds are ``test_seed_offset + i`` on a procedurally generated env; on an env with a finite held-out
    pool (``num_tasks``) the test split takes that pool from its end. Reported numbers only (``rl.test_episodes``,
    ``creditflow eval --split test``). Must lie above the validation seeds."""
    success_threshold: Optional[float] = None
    """The one success rule (R = 1) of the run: the env's ``won`` flag, or ``score >= success_threshold``
    when set (graded envs; WebShop's convention is a score of 1). Used by rollouts, evaluation, the
    expert, CRPS and RRO alike."""


class LoRAConfig(_Section):
    """LoRA adapters (PEFT) instead of full fine-tuning, for every stage that trains the policy: SFT
    (``creditflow sft`` and the SFT before ``train``), DPO (``rro train`` / ``rro run``) and RL (``train``).
    ``policy.lora=true`` is shorthand for ``policy.lora.enabled=true``. docs/scaling.md "LoRA"."""

    enabled: bool = False
    """Train only the adapters. The reference policy (KL in RL, DPO's pi_ref) is the same model with the
    adapter disabled, so no second copy of the model is held; RL checkpoints hold the adapter only."""
    r: int = Field(16, ge=1)
    """Rank of the adapter matrices."""
    alpha: float = Field(32.0, gt=0)
    """Scaling: the adapter's update is multiplied by ``alpha / r``."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter's input while training. 0 for RL: with dropout the trainer's log-probs of an
    unchanged policy differ from the rollout's, so the PPO ratio starts away from 1."""
    target_modules: Union[str, list[str]] = "all-linear"
    """Layers that get an adapter: ``all-linear`` (every linear layer but the output head) or module
    names, e.g. ``[q_proj, k_proj, v_proj, o_proj]`` (matched against the end of each module's name, as PEFT
    does); every name must exist in the model."""

    @field_validator("target_modules")
    @classmethod
    def _targets(cls, value: Union[str, list[str]]) -> Union[str, list[str]]:
        names = [value] if isinstance(value, str) else value
        if not names or any(not name.strip() for name in names):
            raise ValueError("give all-linear or a list of module names, e.g. [q_proj, v_proj]")
        if isinstance(value, str) and value != "all-linear":
            return [value]
        return value


class PolicyConfig(_Section):
    model: Optional[str] = None
    """Local HF model directory. None: build the tiny default (Qwen2 architecture) into the run dir."""
    device: str = "auto"
    """``auto`` (cuda when available), ``cpu``, ``cuda``, ``cuda:1``, ``mps``."""
    dtype: Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"] = "auto"
    """``auto`` (bf16 on GPU, fp32 on CPU; fp32 under ``autocast``), ``float32``, ``bfloat16``, ``float16``."""
    autocast: Literal["none", "bf16"] = "none"
    """Mixed precision: ``bf16`` keeps the weights (and AdamW's state) in float32 and runs the forward passes
    of generation, log-probs and the update (and TRL's SFT / DPO) under ``torch.autocast`` in bfloat16, as
    TRL's ``bf16=True`` does; log-probs and the loss are taken in float32 from the bf16 logits. ``none``: every
    pass in ``dtype``. CPU (AVX-512 BF16 / AMX) or CUDA; on CPU attention runs in float32 (faster there than
    CPU's bf16 attention kernel; docs/scaling.md). With ``backend=vllm`` the engine runs in bfloat16."""
    share_prefix: bool = True
    """Compute repeated tokens once: ``hf`` generation prefills each distinct prompt of a turn's batch once
    and the prefix all of them share (the template's instruction) once; the training and log-prob passes
    run each distinct row once and each prefix a micro-batch's rows share once, level by level of their prefix
    tree, each level attending to its parent prefix's keys/values as a cache.
    Causal attention makes this exact: the same samples' distribution, loss and gradients up to float
    rounding (tests/trainer/test_forward.py, test_rl.py), with fewer tokens through the model (benchmarks/results/step_cost.md).
    False: every prompt and row in full through transformers' ``generate`` and forward."""
    decode: Literal["auto", "lean", "hf"] = "auto"
    """The forward passes of ``hf`` generation's sampling loop (``share_prefix``): ``lean`` runs Qwen2 and LLaMA
    models (the tiny default, SmolLM2) through creditflow's own fused decoder, the prefix every prompt of a batch
    starts with and each repeated prompt held once (``policy/backends/lean.py``; LoRA models, sliding-window and
    other architectures: not supported, an error); ``hf`` through the transformers model call; ``auto``: lean on
    the CPU where supported, else hf (on a GPU the lean path is untested). The same logits to float32 rounding
    and the same draws from the torch RNG (tests/policy/test_lean_decode.py); 1.2-1.45x fewer CPU seconds per
    decode step of the tiny policy (benchmarks/results/step_cost_lean.md). With ``share_prefix=false``, ``auto``
    keeps transformers' ``generate``; ``lean`` runs every prompt in full through the lean loop."""
    rollout_dtype: Literal["same", "bf16"] = "same"
    """The weights ``hf`` generation samples with: ``same``, the trained module itself; ``bf16``, a bfloat16
    copy of its float32 weights, refreshed after every update, while the update, the optimizer and the
    checkpoints stay float32 (verl's bf16 rollout engine beside float32 training). On a CPU with AVX-512 BF16
    SmolLM2's decode steps read half the bytes: 1.9-2.0x the float32 call's tokens/s at batch 1, 8 and 32 with
    the lean decoder, on 2 threads (benchmarks/results/decode_floor_smollm2.md); not on the tiny policy, whose
    decode is bound by overhead (the demo with it: no faster, docs/scaling.md); without native bf16 it is
    emulated and slower (a one-line note says so). The samples are a bf16 policy's (0.04 nats a token from
    the float32 model's log-probs there): the trainer logs that gap (``rl.logprob_gap``, on by default here;
    one forward pass, 11 s of SmolLM2's 80-s step in that record) and ``rl.tis_cap`` corrects it. Needs
    ``backend=hf``, float32 weights and ``autocast=none``."""
    tiny_vocab_size: Optional[int] = Field(None, ge=300)
    """Vocabulary size of the tokenizer trained for the tiny default. None: the env's suggestion
    (webshop: 4096, for its product words and IDs), else 1024."""
    tiny_hidden_size: int = Field(128, ge=8, multiple_of=8)
    """Hidden size of the tiny default (4 attention heads, each an even size for the rotary embedding)."""
    tiny_layers: int = Field(4, ge=1)
    """Transformer layers of the tiny default."""
    template: Literal["paper", "compact"] = "paper"
    """Prompt template: ``paper`` (the papers' wording: role, task, step count, history, observation,
    admissible actions, a reasoning instruction; for real HF models) or ``compact`` (the same facts in a
    few words, 30-50% fewer tokens; for the tiny from-scratch policy). docs/formats.md "Prompts and
    multi-turn layouts"."""
    backend: Literal["hf", "vllm", "openai"] = "hf"
    """Generation backend: ``hf`` (the trained transformers model itself; see ``share_prefix``), ``vllm`` (a colocated
    vLLM engine, weights pushed after every update; ``make vllm``) or ``openai`` (an OpenAI-compatible server,
    for fixed policies: ``eval``, ``rro collect``). See docs/scaling.md."""
    base_url: Optional[str] = None
    """``backend=openai``: the server's API root, e.g. ``http://127.0.0.1:8000/v1`` (API key: ``OPENAI_API_KEY``)."""
    model_name: Optional[str] = None
    """``backend=openai``: the model's name on the server (``vllm serve DIR`` names it ``DIR``)."""
    request_timeout: float = Field(120.0, gt=0)
    """``backend=openai``: seconds before a request counts as failed."""
    request_retries: int = Field(3, ge=0)
    """``backend=openai``: tries after a failed request, with exponential backoff from 1 s; then exit 2."""
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    """``backend=vllm`` on GPU: share of GPU memory for vLLM (weights + KV cache); the rest trains."""
    vllm_kv_cache_gib: Optional[float] = Field(None, gt=0)
    """``backend=vllm``: KV-cache size in GiB (None: 1 GiB of RAM on CPU, ``vllm_gpu_memory_utilization`` on GPU)."""
    vllm_max_model_len: Optional[int] = Field(None, ge=16)
    """``backend=vllm``: longest prompt + response (None: the model's own limit)."""
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    """LoRA adapters instead of full fine-tuning (SFT, DPO, RL); ``policy.lora=true`` turns them on with the
    defaults."""

    @field_validator("lora", mode="before")
    @classmethod
    def _lora_switch(cls, value: Any) -> Any:
        return {"enabled": value} if isinstance(value, bool) else value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", value):
            raise ValueError("must be auto, cpu, cuda, cuda:N or mps")
        return value

    @model_validator(mode="after")
    def _mixed_precision(self) -> "PolicyConfig":
        if self.autocast != "none" and self.dtype not in ("auto", "float32", "fp32"):
            raise ValueError(f"autocast={self.autocast} keeps float32 weights and computes in {self.autocast}; "
                             f"set dtype to auto or float32 (got {self.dtype})")
        if self.rollout_dtype == "bf16":
            if self.backend != "hf":
                raise ValueError(f"rollout_dtype=bf16 is a copy the hf backend samples with; backend={self.backend} "
                                 "sets its engine's precision with dtype / autocast")
            if self.autocast != "none":
                raise ValueError("rollout_dtype=bf16 and autocast=bf16 both sample in bf16; set one of them")
            if self.dtype not in ("auto", "float32", "fp32"):
                raise ValueError(f"rollout_dtype=bf16 copies float32 weights; the weights are {self.dtype} "
                                 "(set dtype to float32, or keep rollout_dtype=same)")
        return self

    @property
    def weights_dtype(self) -> str:
        """The dtype the weights are loaded in: ``dtype``, with ``auto`` meaning float32 under ``autocast``."""
        return "float32" if self.autocast != "none" and self.dtype == "auto" else self.dtype


class GenerationConfig(_Section):
    max_new_tokens: int = Field(32, ge=1)
    """Response budget per turn (tokens)."""
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature for training rollouts (papers: 1.0)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling for training rollouts."""
    eval_temperature: float = Field(0.0, ge=0.0)
    """Temperature for held-out evaluation; 0 = greedy."""
    stop_at_action_close: bool = True
    """Stop generating at ``</action>`` (saves tokens; nothing after it is executed anyway)."""


class RolloutConfig(_Section):
    tasks_per_step: int = Field(8, ge=1)
    """B: distinct tasks per training step (verl-agent / RewardFlow: 16)."""
    group_size: int = Field(8, ge=1)
    """G: rollouts per task (GRPO / GiGPO / RewardFlow: 8)."""
    history_length: int = Field(2, ge=0)
    """H: previous observation/action pairs shown in the prompt (papers: 2; ``window`` layout only)."""
    history: Literal["window", "conversation"] = "window"
    """Multi-turn layout. ``window`` (the papers'): each turn is a fresh prompt with the last H pairs, one
    training sequence per decision. ``conversation``: one growing chat per episode (the policy's sampled
    tokens as assistant turns, the observations as user turns), so turn t's prompt is a prefix of turn
    t+1's; one training sequence per trajectory scores all its decisions, on the exact sampled token ids,
    environment tokens masked out. docs/formats.md "Multi-turn layouts"."""
    invalid_penalty: float = Field(0.1, ge=0)
    """Subtracted from the reward of an unparseable / non-admissible action (papers: 0.1)."""
    max_steps: Optional[int] = Field(None, ge=1)
    """Episode cap; None = the env's own ``max_steps``. Below it, the engine cuts episodes there and tells the env
    (its ``truncate()``, where it has one: the env adapters end and score the episode as at their own limit); the
    last step is recorded ``truncated``."""


class RLConfig(_Section):
    algo: str = "grpo"
    """Credit estimator: grpo, rloo, gigpo, rewardflow, graphgpo, g2po, gagpo (``creditflow credit --help`` lists knobs)."""
    credit: dict[str, Any] = Field(default_factory=dict)
    """Knobs passed to the estimator, e.g. ``{gamma: 0.9}``."""
    steps: int = Field(20, ge=0)
    """Training steps (one step = rollout of B x G episodes + policy update)."""
    lr: float = Field(1e-5, gt=0, le=1)
    """AdamW learning rate (papers use 1e-6 for 1.5-7B models; the tiny default needs more)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    ppo_epochs: int = Field(1, ge=1)
    """Passes over each rollout batch."""
    minibatches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split into this many mini-batches)."""
    clip_eps: float = Field(0.2, gt=0, lt=1)
    """PPO clip epsilon, lower side (papers: 0.2): the ratio is clipped below at 1 - clip_eps."""
    clip_eps_high: Optional[float] = Field(None, gt=0)
    """Upper clip epsilon (None = same as ``clip_eps``)."""
    kl_coef: float = Field(0.01, ge=0)
    """Weight of the k3 KL penalty to the reference policy (pi_SFT); papers: 0.01."""
    entropy_coef: float = Field(0.0, ge=0)
    """Entropy bonus weight (0 = entropy only logged)."""
    tis_cap: Optional[float] = Field(None, gt=0)
    """Truncated importance sampling (verl's ``tis_imp_ratio_cap``; Yao et al. 2025, "Your efficient RL
    framework secretly brings you off-policy RL training"): with a cap C, the PPO ratio is taken against the
    trainer's own log-probs of the rollout tokens, and each token's loss is weighted by
    min(pi_train(a) / pi_rollout(a), C), which corrects the remaining mismatch between the generation backend
    and the trainer. None: off, the ratio is taken against the rollout log-probs (usual PPO). Typical C: 2."""
    logprob_gap: Optional[bool] = None
    """Log ``train/rollout_logprob_gap`` (one extra forward pass without gradient, ~15% of a tiny-policy
    step). None: on for the ``vllm`` and ``openai`` backends, for ``hf`` with ``policy.rollout_dtype=bf16`` and
    whenever ``tis_cap`` is set; off for ``hf`` sampling with the trained weights themselves, where the gap is
    float noise by construction."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping norm."""
    token_budget: int = Field(16384, ge=64)
    """Micro-batches are packed so that (rows x padded length) stays under this many tokens."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "traj-mean"] = "token-mean"
    """How per-token losses are averaged: over all response tokens (``token-mean``), per decision then
    over decisions (``seq-mean-token-mean``), or per trajectory then over trajectories (``traj-mean``:
    a long failed episode weighs no more than a short success, so with group-normalised advantages the
    tokens every response shares, such as the action tags, get no net push)."""
    eval_every: int = Field(10, ge=0)
    """Evaluate on held-out seeds every N steps (0 = only at the end)."""
    eval_episodes: int = Field(32, ge=1)
    """Validation tasks per evaluation (the ``eval/*`` metrics)."""
    test_episodes: int = Field(0, ge=0)
    """Test-split tasks evaluated once before RL (π_SFT) and once after it (the ``test/*`` metrics, for reported
    numbers); 0 = no test evaluation."""
    save_every: int = Field(10, ge=0)
    """Checkpoint every N steps (0 = only at the end)."""


class SFTConfig(_Section):
    demos: int = Field(256, ge=1)
    """Expert episodes (training seeds) turned into demonstrations."""
    epochs: float = Field(2.0, gt=0)
    """Passes over the demonstrations."""
    lr: float = Field(1e-3, gt=0, le=1)
    """Learning rate (the tiny model is trained from scratch)."""
    batch_size: int = Field(32, ge=1)
    """Per-device batch size."""
    max_length: int = Field(1024, ge=16)
    """Longest prompt+response kept (longer examples are truncated by TRL)."""
    group_by_length: bool = False
    """Batch demonstrations of similar length together (transformers' ``LengthGroupedSampler``: random
    mega-batches, sorted inside), so less of each batch is padding. Same examples and epochs, another
    batch order; worth it where prompt lengths vary (webshop: a search page is ~80 tokens, a results page
    ~700, and random batches of 16 are about half padding)."""
    prompt_loss: bool = False
    """Also put the loss on the prompt tokens (TRL's ``completion_only_loss=false``), not only on the
    response. For a policy trained from scratch this language-model loss on the env's pages is its only
    pre-training: pages that repeat themselves (webshop lists every product ID twice: in the results and in
    the admissible actions) teach it to copy, which response-only SFT shows once per decision
    (docs/environments.md, "The tiny policy on webshop")."""
    seed_offset: int = Field(500_000, ge=0, le=SEED_MAX)
    """Demonstrations use seeds ``seed_offset + i`` (disjoint from RL and eval seeds)."""
    evaluate: bool = True
    """``creditflow sft``: when SFT ends, evaluate π_SFT on the ``rl.eval_episodes`` validation tasks that ``train``
    evaluates at step 0, print its held-out success and add it to ``sft_metrics.json`` (``--no-eval``: false).
    Not with ``tools`` (creditflow's own prompts are not the tool-calling chats it learns)."""
    tools: bool = False
    """``creditflow sft --tools``: train tool-calling chats (each expert action a tool call, its result a tool
    message) and save a model whose chat template renders and parses tool calls, for TRL's
    ``environment_factory`` (docs/trl.md). For an env whose actions are tool calls (``trl:module:Class``);
    ``sft`` only (``train`` and ``rro`` run creditflow's own prompts)."""


class CurriculumConfig(_Section):
    """Start-state curriculum (paper 002): CRPS, the ExpReplay baseline, or none. See docs/methods.md."""

    name: Literal["none", "crps", "expreplay"] = "none"
    """``crps``: replay successful suffixes with the dynamic-k controller; ``expreplay``: replay stored
    successful tasks from their initial state (k = T); ``none``: fresh tasks only (diagnostics still
    logged)."""
    p_replay: float = Field(0.2, ge=0.0, le=1.0)
    """Eq. 13: probability that a group is a replay group (App. F: 0.2)."""
    band: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=lambda: [0.2, 0.8], min_length=2,
                                                                max_length=2)
    """Eq. 12: target band [rho_l, rho_u] for the replay success EMA (App. E: [0.2, 0.8])."""
    ema_lambda: float = Field(0.9, gt=0.0, le=1.0)
    """Eq. 11: lambda, the weight of the *newest* replay group in the EMA (App. E: 0.9; 1 = no smoothing)."""
    delta: int = Field(2, ge=1)
    """Eq. 12: step size Delta of k (App. E: 2)."""
    beta_min: float = Field(0.2, ge=0.0, le=1.0)
    """Eq. 9: k0 fraction of T for a task with acc(x) = 0 (paper gives no value; ours)."""
    beta_max: float = Field(1.0, ge=0.0, le=1.0)
    """Eq. 9: k0 fraction of T for a task with acc(x) = 1 (paper gives no value; ours: the full trajectory)."""
    k_min: int = Field(1, ge=1)
    """Eq. 9/12: smallest suffix length."""
    k_max: Optional[int] = Field(None, ge=1)
    """Eq. 9/12: largest suffix length; None = T of each entry (replay may grow to the full task)."""
    alpha_max: float = Field(0.5, ge=0.0, le=1.0)
    """Eq. 7: insert a success only if its fresh group's success rate acc(x) <= alpha_max. Paper gives no
    value; 0.5 = the band midpoint: a task solved at most half the time from the start is still hard
    enough that suffix replay (easier than the full task) has room below rho_u to grow k, while tasks
    solved more often already give mixed fresh groups and would replay as all-success groups."""
    capacity: int = Field(256, ge=1)
    """Most entries in the success buffer (one per task instance)."""
    eviction: Literal["oldest", "easiest"] = "oldest"
    """When the buffer is full: ``oldest`` (FIFO, favours recent successes of the current policy) or
    ``easiest`` (the entry with the highest replay-success EMA, i.e. closest to mastery)."""
    mastery_threshold: float = Field(0.9, ge=0.0, le=1.0)
    """Mastery removal (§3.5): an entry whose k reached its maximum (T) and whose replay EMA stays above
    this value is removed (above rho_u, so removal means even the full task replays too easily)."""
    mastery_patience: int = Field(2, ge=1)
    """...for this many consecutive replay groups at the full horizon ("consistently", §3.5)."""
    warm_start_demos: int = Field(0, ge=0)
    """Pre-fill the buffer with the env expert's solutions of training seeds 0..N-1 (acc(x) taken as 0).
    Not part of the paper's method (0 = off): for smoke tests and debugging replay with a weak policy."""

    @field_validator("band")
    @classmethod
    def _band(cls, band: list[float]) -> list[float]:
        if not band[0] < band[1]:
            raise ValueError("must be [rho_l, rho_u] with 0 <= rho_l < rho_u <= 1")
        return band

    @model_validator(mode="after")
    def _check(self):
        if self.beta_min > self.beta_max:
            raise ValueError(f"beta_min ({self.beta_min}) must be <= beta_max ({self.beta_max})")
        if self.k_max is not None and self.k_max < self.k_min:
            raise ValueError(f"k_max ({self.k_max}) must be >= k_min ({self.k_min})")
        return self


class RRODPOConfig(_Section):
    beta: float = Field(0.1, gt=0)
    """β of the DPO loss (RRO §3.4). 0.1 is the usual DPO / TRL value; §4.3 does not state it."""
    epochs: float = Field(3.0, gt=0)
    """Passes over the preference data (RRO §4.3: 3 epochs)."""
    lr: float = Field(3e-6, gt=0, le=1)
    """Learning rate (RRO §4.3: constant 3e-6 for Gemma-2 2B; the tiny CPU default needs ~1e-4)."""
    batch_size: int = Field(32, ge=1)
    """Pairs per optimizer step (RRO §4.3: 32)."""
    warmup: float = Field(0.1, ge=0)
    """Warmup: a ratio of the total steps when < 1, else a whole number of steps (RRO §4.3: ratio 0.1)."""
    scheduler: Literal["constant_with_warmup", "constant", "linear", "cosine", "cosine_with_restarts", "polynomial",
                       "inverse_sqrt"] = "constant_with_warmup"
    """transformers LR scheduler (RRO §4.3: constant learning rate after warmup); the schedulers that need
    no extra arguments."""
    max_length: int = Field(1024, ge=16)
    """Longest prompt + response kept (TRL truncates longer pairs)."""
    sft_weight: float = Field(0.0, ge=0)
    """Weight of a negative log-likelihood term on the chosen response (token mean) added to the DPO loss, as in
    RPO (Pang et al. 2024); TRL's ``loss_type=["sigmoid", "sft"]``. 0 = plain DPO, as RRO §3.4 trains. It keeps
    DPO from lowering the chosen action's own likelihood while it widens the margin."""
    pairs: Literal["all", "valid_chosen"] = "all"
    """Which collected pairs DPO trains on. ``all`` (RRO §3.4). ``valid_chosen``: drop the pairs whose chosen
    action is invalid (a no-op that passed the rising test on the state's own value; docs/methods.md "RRO"), to
    reuse a collection made under the paper's rule without them. Not in the paper."""

    @field_validator("warmup")
    @classmethod
    def _warmup(cls, value: float) -> float:
        if value >= 1 and value != int(value):
            raise ValueError("a ratio below 1 or a whole number of steps")
        return value

    @model_validator(mode="before")
    @classmethod
    def _lora_moved(cls, data: Any) -> Any:
        """The LoRA settings that were here (``lora``, ``lora_r``, ...) are ``policy.lora`` now, shared by SFT,
        DPO and RL: say where one went instead of "unknown option"."""
        if isinstance(data, dict):
            for key in sorted(k for k in data if isinstance(k, str) and k.startswith("lora")):
                new = "enabled" if key == "lora" else key.removeprefix("lora_")
                raise ValueError(f"{key} moved to policy.lora.{new} (one LoRA config for sft, rro train and train)")
        return data


class RROConfig(_Section):
    exploration: Literal["rising", "fixed"] = "rising"
    """Next-action exploration: ``rising`` = reward-rising sampling (RRO §3.2, Alg. 1); ``fixed`` = the
    fixed-size exploration baseline (§4.2: always ``candidates`` candidates, best vs. worst)."""
    candidates: int = Field(5, ge=1)
    """N_max for ``rising`` (stop after this many candidates; §4.3: 5) / N for ``fixed`` (§4.2, Table 1: 5)."""
    mc_rollouts: int = Field(5, ge=1)
    """m: rollouts averaged per process-reward estimate (RRO §2, Alg. 1 ProcessReward; §4.3: 5)."""
    invalid_action_reward: Optional[float] = None
    """Process reward of a candidate that is an invalid action (unparseable, or not admissible where it is
    taken). None (the paper): its MC estimate, like any candidate's. An invalid action is a no-op, so that
    estimate is the current state's value again, and it often meets the rising test r_t ≥ r_{t−1}.
    A number below every score (e.g. -1): that value, with no MC rollouts. An invalid candidate then never rises
    and is never chosen over a valid one, and it is its step's rejected action when a valid candidate exists.
    docs/methods.md "RRO"."""
    tasks: int = Field(64, ge=1)
    """Training tasks (env seeds ``seed_offset + i``) to collect preference data on."""
    seed_offset: int = Field(300_000, ge=0, le=SEED_MAX)
    """Collection seeds are ``seed_offset + i`` (disjoint from SFT demos, RL draws and eval seeds)."""
    executor: Literal["inprocess", "ray"] = "inprocess"
    """Where the env work of the MC rollouts runs: ``inprocess`` or ``ray`` (generation stays in the driver;
    the same seeds give the same data with either)."""
    ray_address: Optional[str] = None
    """Ray cluster to join (``auto`` or ``ray://host:port``); None starts a local Ray."""
    ray_workers: Optional[int] = Field(None, ge=1)
    """Env actors on Ray (None: one per CPU of the cluster)."""
    data_dir: Optional[str] = None
    """Where preference data is written / read; None = ``<out_dir>/preferences``."""
    eval_episodes: int = Field(64, ge=1)
    """Held-out tasks for the π_SFT vs π_DPO evaluation of ``rro run``."""
    dpo: RRODPOConfig = Field(default_factory=RRODPOConfig)
    """DPO training (RRO §3.4, §4.3)."""


class CheckpointConfig(_Section):
    """What ``creditflow train`` keeps of its checkpoints (``rl.save_every`` says when one is written). A
    checkpoint holds the policy, the loop state (RNG states, curriculum buffer) and, where ``--resume`` needs it,
    AdamW's state (``optimizer.pt``: twice the size of the trained weights). The size of the
    first checkpoint is printed once."""

    keep_last: Optional[int] = Field(2, ge=1)
    """The newest checkpoints kept; each new one removes those beyond it. ``--resume`` continues from the newest
    (the one before it when the newest is damaged); ``eval``/``export`` take any. None: keep every checkpoint."""
    optimizer: Literal["newest", "all"] = "newest"
    """Where AdamW's state is kept: ``newest``, the checkpoint ``--resume`` continues from (a new checkpoint
    removes it from the one before, which keeps its weights and loop state: a resume from it, when the newest is
    damaged, says so and starts AdamW's moments afresh), or ``all``, in every kept checkpoint (such a resume is
    exact too)."""


TRACKERS = ("tensorboard", "wandb", "trackio")
"""The ``logging.report_to`` names (TRL's and transformers' names for the same libraries)."""


class LoggingConfig(_Section):
    """Where ``creditflow train`` sends its metrics besides ``metrics.jsonl`` (the same names, one row per step
    and the step-0 evaluation). docs/metrics.md "Experiment tracking"."""

    report_to: list[Literal["tensorboard", "wandb", "trackio"]] = Field(default_factory=lambda: ["tensorboard"])
    """Trackers, as TRL's ``report_to`` names them: ``tensorboard`` (event files in ``out_dir/tb``), ``wandb``
    (Weights & Biases: ``pip install wandb``, files in ``out_dir/wandb``; ``WANDB_MODE=offline`` keeps them
    local), ``trackio`` (``pip install trackio``; a local database in ``TRACKIO_DIR``, default
    ``~/.cache/huggingface/trackio``). ``none`` or ``[]``: JSONL only. A comma-separated string works too."""
    project: str = Field("creditflow", min_length=1)
    """The wandb / trackio project."""
    run_name: Optional[str] = None
    """The wandb / trackio run name; None: the run directory's name. A resumed run continues the same run."""

    @field_validator("report_to", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return tracker_names(value)


def tracker_names(value: Any) -> Any:
    """``logging.report_to`` as a list: a comma-separated string split, ``none`` (or null) the empty list, an
    unknown name a ValueError with the closest known one."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        if value == ["none"]:
            return []
        for name in value:
            if isinstance(name, str) and name not in TRACKERS:
                raise ValueError(f"unknown tracker {name!r}{did_you_mean(name, TRACKERS)}; give some of "
                                 f"{', '.join(TRACKERS)}, or none")
        if len(set(map(str, value))) != len(value):
            raise ValueError("names a tracker twice")
    return value


class ResumeRecord(_Section):
    """What one ``creditflow train --resume`` changed (written by creditflow, not a setting)."""

    from_step: int = Field(ge=0)
    """The first training step run with the changed settings."""
    changed: dict[str, list] = Field(default_factory=dict)
    """Each changed setting (dotted key) -> ``[value before, value after]``."""


class RunConfig(_Section):
    seed: int = Field(0, ge=0, le=SEED_MAX)
    """Master seed (sampling, task draws, initialisation)."""
    out_dir: str = "runs/latest"
    """Run directory: config, metrics, checkpoints, report."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    rl: RLConfig = Field(default_factory=RLConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    """Start-state curriculum (CRPS / ExpReplay / none) for ``creditflow train``."""
    rro: RROConfig = Field(default_factory=RROConfig)
    """RRO preference collection and DPO (``creditflow rro ...``)."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """What ``creditflow train`` keeps of its checkpoints."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Experiment tracking: TensorBoard, Weights & Biases, trackio."""
    resumes: list[ResumeRecord] = Field(default_factory=list)
    """Written by ``train --resume``: the settings each resume changed and the step they took effect
    (``config.yaml`` always holds the settings in force now)."""

    @model_validator(mode="before")
    @classmethod
    def _tensorboard_switch(cls, data: Any) -> Any:
        """``tensorboard: true/false``, the switch before ``logging.report_to`` (config files and run directories
        of earlier releases hold it): adds or removes ``tensorboard`` there."""
        if not isinstance(data, dict) or "tensorboard" not in data:
            return data
        data = dict(data)
        switch = data.pop("tensorboard")
        if not isinstance(switch, bool):
            raise ValueError(f"tensorboard: expects true or false (got {switch!r}); the setting is "
                             "logging.report_to now")
        logging = data.get("logging") or {}
        if isinstance(logging, dict):  # else the section's own error follows
            names = tracker_names(logging.get("report_to", ["tensorboard"]))
            names = [n for n in names if n != "tensorboard"] if isinstance(names, list) else names
            if isinstance(names, list):
                names = (["tensorboard"] + names) if switch else names
            data["logging"] = {**logging, "report_to": names}
        return data


class Setting(str):
    """A ``key=value`` override whose value is taken as it is, never YAML-parsed: what a named command-line
    option (``--out "runs/my run #2"``, ``--out 2024``, ``--env gymnasium:``) sets. ``setting(key, value)`` makes
    one; it is a ``str`` (``"key=value"``) wherever overrides are passed around."""

    value: Any

    def __new__(cls, key: str, value: Any) -> "Setting":
        item = super().__new__(cls, f"{key}={value}")
        item.value = value
        return item

    def __getnewargs__(self):  # copies and pickles keep the value
        key = str.partition(self, "=")[0]
        return (key, self.value)


def setting(key: str, value: Any) -> Setting:
    """The override ``key=value`` with ``value`` taken literally (see :class:`Setting`)."""
    return Setting(key, value)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping (YAML says keys are unique; PyYAML would
    keep the last one silently)."""


def _no_duplicate_keys(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:  # an unhashable key: PyYAML's own error follows
            continue
        if first is not key_node:
            raise DuplicateKeyError(key, first.start_mark, key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark):
        self.key, self.first, self.second = key, first, second
        super().__init__(f"key {key!r} given twice")


def yaml_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys (:class:`DuplicateKeyError`)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def _parse_value(text: str, item: str = "") -> Any:
    try:
        return yaml_load(text)
    except DuplicateKeyError as exc:
        raise UserError(f"override {item!r}: key {exc.key!r} given twice (columns {exc.first.column + 1} and "
                        f"{exc.second.column + 1} of the value)") from None
    except yaml.YAMLError:
        return text


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    """``data[a][b][c] = value`` for ``a.b.c``. A true/false given for a section is its ``enabled`` switch, so
    ``policy.lora=true`` and ``policy.lora.r=8`` combine in either order."""
    parts = dotted.split(".")
    cur = data
    for part in parts[:-1]:
        nxt = cur.setdefault(part, {})
        if isinstance(nxt, bool):
            nxt = cur[part] = {"enabled": nxt}
        if not isinstance(nxt, dict):
            raise UserError(f"override {dotted}: {part!r} is not a section")
        cur = nxt
    if isinstance(value, bool) and isinstance(cur.get(parts[-1]), dict):
        cur[parts[-1]]["enabled"] = value
    else:
        cur[parts[-1]] = value


def read_text_file(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``, or a one-line UserError: missing, a directory, unreadable, not UTF-8."""
    if not path.exists():
        raise UserError(f"{what} {str(path)!r} does not exist")
    if path.is_dir():
        raise UserError(f"{what} {str(path)!r} is a directory, not a file")
    try:
        return path.read_text(encoding="utf-8")
    except PermissionError:
        raise UserError(f"{what} {str(path)!r}: permission denied") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x})") from None
    except OSError as exc:
        raise UserError(f"{what} {str(path)!r}: {exc.strerror or exc}") from None


def load_yaml(path: str | Path) -> dict:
    p = Path(path)
    text = read_text_file(p, "config file")
    try:
        data = yaml_load(text)
    except DuplicateKeyError as exc:
        raise UserError(f"{p}:{exc.second.line + 1}: key {exc.key!r} given twice (lines {exc.first.line + 1} and "
                        f"{exc.second.line + 1}); give each setting once") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: invalid YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{p}: the top level must be a mapping, got {type(data).__name__}")
    found = misplaced_section(data)
    if found is not None:  # said here, at its line, not by an override that reaches into it
        keys, value = found
        raise UserError(f"{p}:{_line_of(text, keys)}: {'.'.join(keys)}: {_NOT_A_SECTION} (got {value!r})")
    return data


_NOT_A_SECTION = "must be a section of key: value settings"


def misplaced_section(data: dict, model: type[BaseModel] | None = None, keys: tuple = ()) -> tuple[tuple, Any] | None:
    """The first key of ``data`` that names a section of the run config (``rl``, ``policy.lora``) but holds no
    mapping (``rl: [1, 2]``), with its value; None when there is none. ``policy.lora`` may be its true/false
    switch."""
    model = model or RunConfig
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        section = field.annotation if field is not None else None
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            continue
        if isinstance(value, dict):
            inner = misplaced_section(value, section, (*keys, key))
            if inner is not None:
                return inner
        elif not (isinstance(value, bool) and "enabled" in section.model_fields):
            return (*keys, key), value
    return None


def _line_of(text: str, keys: tuple) -> int:
    """The line (from 1) of the nested key ``keys`` in the YAML ``text`` (1 where it cannot be found)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return 1
    line = 1
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key), None)
        if match is None:
            break
        line, node = match[0].start_mark.line + 1, match[1]
    return line


def build_config(config_file: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                 base: dict | None = None, where: str | None = None) -> RunConfig:
    """YAML file (optional) + ``key=value`` overrides -> validated :class:`RunConfig`."""
    if isinstance(overrides, str):
        raise TypeError(f"overrides must be a list of key=value strings, got the string {overrides!r} "
                        f"(pass [{overrides!r}])")
    data: dict = dict(base or {})
    found = misplaced_section(data)
    if found is not None:  # said of the config given, not of an override that reaches into it
        raise UserError(f"{where or 'config'}: {'.'.join(found[0])}: {_NOT_A_SECTION} (got {found[1]!r})")
    if config_file:
        data.update(load_yaml(config_file))
    for item in overrides:
        if isinstance(item, Setting):  # a named option's value: literal
            set_dotted(data, str.partition(item, "=")[0], item.value)
            continue
        if "=" not in item:
            raise UserError(f"override {item!r} must look like key=value (e.g. rl.lr=1e-5)")
        key, _, raw = item.partition("=")
        if not key.strip() or not all(part.strip() for part in key.strip().split(".")):
            raise UserError(f"override {item!r}: the key before '=' must be a dotted setting name such as rl.lr "
                            f"(no empty part)")
        set_dotted(data, key.strip(), _parse_value(raw, item))
    return validate_config(data, where or (str(config_file) if config_file else "config"))


def validate_config(data: dict, where: str = "config") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown option" + did_you_mean(err["loc"][-1], _section_fields(err["loc"][:-1]),
                                                  prefix=".".join(str(x) for x in (*err["loc"][:-1], "")))
        elif err["type"] == "value_error":  # a validator's own message, without pydantic's prefix
            msg = str(err["ctx"]["error"])
        elif err["type"] in ("model_type", "model_attributes_type", "dict_type"):  # a list where a section goes
            msg = "must be a section of key: value settings" if err["type"] != "dict_type" else \
                "must be a mapping of key: value"
        got = err.get("input")
        shown = "" if err["type"] == "extra_forbidden" or isinstance(got, dict) else f" (got {got!r})"
        raise UserError(f"{where}: {loc + ': ' if loc else ''}{msg}{shown}") from None


def _section_fields(loc: tuple) -> list[str]:
    """The setting names of the config section at ``loc`` (``("rl",)``), for "did you mean"; none for a free-form
    mapping (``env.kwargs``) or a list."""
    model: Any = RunConfig
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        inner = getattr(field, "annotation", None)
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return []
        model = inner
    return [name for name in model.model_fields if name != "resumes"]


def given_settings(cfg: BaseModel) -> dict:
    """The settings of ``cfg`` that were given (by a file, an override, a constructor or an assignment), nested
    as a config file holds them. Rebuilding a config from them keeps what was given apart from what defaulted,
    which decides whether a model's saved settings apply (``recipes/resolve.with_model_settings``)."""
    out: dict = {}
    for name in type(cfg).model_fields:
        value = getattr(cfg, name)
        if isinstance(value, BaseModel):
            inner = given_settings(value)
            if inner or name in cfg.model_fields_set:
                out[name] = inner
        elif name in cfg.model_fields_set:
            out[name] = cfg.model_dump(include={name})[name]
    return out


PATH_SETTINGS = ("policy.model", "rro.data_dir")
"""The settings that name a local path, which a run directory's ``config.yaml`` keeps absolute."""


def dump_config(cfg: RunConfig, path: str | Path) -> None:
    """Write ``cfg`` as YAML (``resumes`` only once a resume changed something), the local paths of
    :data:`PATH_SETTINGS` made absolute: a run directory's config reads the same from any working directory
    (``train --resume``)."""
    data = cfg.model_dump(exclude={"resumes"} if not cfg.resumes else None)
    for key in PATH_SETTINGS:
        section, _, name = key.partition(".")
        value = data[section][name]
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            data[section][name] = os.path.abspath(Path(value).expanduser())
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))


def flat_settings(data: dict, prefix: str = "") -> dict[str, Any]:
    """``{"rl": {"lr": 1e-5}}`` -> ``{"rl.lr": 1e-5}`` (nested mappings, e.g. ``env.kwargs``, too; an empty
    one holds no setting)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flat_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changed_settings(before: RunConfig, after: RunConfig) -> dict[str, list]:
    """Dotted key -> ``[before, after]`` for every setting that differs (``out_dir`` and ``resumes`` aside)."""
    old = flat_settings(before.model_dump(exclude={"out_dir", "resumes"}))
    new = flat_settings(after.model_dump(exclude={"out_dir", "resumes"}))
    return {key: [old.get(key), new.get(key)] for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)}
