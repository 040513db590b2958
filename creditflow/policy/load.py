"""Loading a policy, and where and in what precision it runs.

:func:`load_policy` loads any local Hugging Face causal LM (a LoRA adapter as its base model with the adapter
merged in), checked first by :func:`creditflow.policy.validate.check_model_dir`. The device and dtype settings
are resolved here (``policy.device``, ``policy.dtype``, ``policy.autocast``), and so is the bf16 autocast
context with its float32-attention-on-CPU patch, registered with transformers' attention interface. Nothing is
downloaded.
"""

from __future__ import annotations

import contextlib
import platform
import warnings
from pathlib import Path
from typing import Iterator

import torch
from peft import PeftModel
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from creditflow.errors import UserError
from creditflow.policy.tiny import CHAT_TEMPLATE
from creditflow.policy.validate import adapter_base, check_model_dir, is_adapter_dir, quiet_transformers

# transformers 5 deprecated ``is_gradient_checkpointing``, which PEFT and TRL still read (PEFT once a wrap, TRL's
# trainers every step): nothing a creditflow user can act on, so the calls creditflow makes hide it
DEPRECATIONS_OF_OTHERS = r"`is_gradient_checkpointing` is deprecated"


@contextlib.contextmanager
def others_deprecations_hidden() -> Iterator[None]:
    """Run a block without the FutureWarnings in :data:`DEPRECATIONS_OF_OTHERS` (PEFT's and TRL's, not ours)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DEPRECATIONS_OF_OTHERS, category=FutureWarning)
        yield


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` or ``cpu``; a device this machine does not have is a one-line UserError."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"policy.device={device!r} requested but CUDA is not available (use cpu or auto)")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"policy.device={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise UserError("policy.device='mps' requested but MPS is not available (use cpu or auto)")
    return device


def resolve_dtype(dtype: str, device: str):
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise UserError(f"policy.dtype must be one of auto, {', '.join(table)}; got {dtype!r}")
    return table[dtype]


def check_device_and_dtype(device: str, dtype: str, autocast: str = "none") -> None:
    """``policy.device`` / ``policy.dtype`` / ``policy.autocast`` usable on this machine (checked before any work)."""
    device = resolve_device(device)
    resolve_dtype(dtype, device)
    if autocast == "none":
        return
    if not (device == "cpu" or device.startswith("cuda")):
        raise UserError(f"policy.autocast={autocast} runs on cpu or cuda, not {device}; use policy.autocast=none")
    if device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        raise UserError(f"policy.autocast={autocast}: this GPU has no bfloat16 support; use policy.autocast=none")


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """Whether this x86 CPU computes bfloat16 natively (AVX-512 BF16 or AMX); None where it cannot be told
    (another architecture or no /proc/cpuinfo)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    return None if flags is None else bool({"avx512_bf16", "amx_bf16"} & set(flags))


def autocast_note(device: str, autocast: str, cpuinfo: str = "/proc/cpuinfo", *,
                  rollout_dtype: str = "same") -> str | None:
    """A one-line note when ``policy.autocast=bf16`` or ``policy.rollout_dtype=bf16`` will run on a CPU without
    native bfloat16, where every bf16 product is emulated: the RL step of step_cost.py took 4.5x (conversation)
    to 6.1x (window) longer than in float32 on such a host (AVX2 only, benchmarks/results/step_cost_1201.md)."""
    if autocast != "none":
        setting, instead = f"policy.autocast={autocast}", "policy.autocast=none"
    elif rollout_dtype != "same":
        setting, instead = f"policy.rollout_dtype={rollout_dtype}", "policy.rollout_dtype=same"
    else:
        return None
    if resolve_device(device) != "cpu" or cpu_has_native_bf16(cpuinfo) is not False:
        return None
    return (f"note: {setting} on a CPU without AVX-512 BF16 or AMX: bfloat16 is emulated here and "
            f"runs several times slower than float32 ({instead})")


def mixed_precision(model, autocast: str = "none"):
    """The context a forward pass of ``model`` runs in: ``torch.autocast`` in bfloat16 on the model's device
    for ``autocast="bf16"`` (weights stay as they are), else nothing. On CPU the model's SDPA attention is
    switched to :data:`CPU_FLOAT32_SDPA` first: bf16 linear layers, float32 attention."""
    if autocast == "none":
        return contextlib.nullcontext()
    if autocast != "bf16":
        raise ValueError(f"autocast must be none or bf16, got {autocast!r}")
    device = next(model.parameters()).device.type
    if device == "cpu":
        float32_attention_on_cpu(model)
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


# CPU autocast runs scaled_dot_product_attention in bfloat16, and on this project's CPUs (AVX-512 BF16) the
# bf16 flash-attention kernel is slower than the float32 one (backward most of all), while bf16 matrix
# products are several times faster than float32 ones (benchmarks/results/step_cost.md, levers). Under
# policy.autocast=bf16 on CPU, attention therefore runs in float32 on float32 copies of queries, keys and
# values; the linear layers stay in bf16. Outside CPU autocast the function is transformers' SDPA unchanged.
CPU_FLOAT32_SDPA = "sdpa_float32_on_cpu"


def _sdpa_float32_on_cpu(module, query, key, value, attention_mask, **kwargs):
    if not (query.device.type == "cpu" and torch.is_autocast_enabled("cpu")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.float()
    with torch.autocast("cpu", enabled=False):
        return sdpa_attention_forward(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)


AttentionInterface.register(CPU_FLOAT32_SDPA, _sdpa_float32_on_cpu)
AttentionMaskInterface.register(CPU_FLOAT32_SDPA, sdpa_mask)  # the masks SDPA takes


def float32_attention_on_cpu(model) -> None:
    """Switch ``model`` (or a PEFT model's base) from ``sdpa`` attention to :data:`CPU_FLOAT32_SDPA`; other
    attention implementations (eager, flash, ...) are left as they are. Idempotent."""
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    config = getattr(base, "config", None)
    if getattr(config, "_attn_implementation", None) == "sdpa" and hasattr(base, "set_attn_implementation"):
        base.set_attn_implementation(CPU_FLOAT32_SDPA)


def load_tokenizer(path: str | Path):
    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if tok.chat_template is None:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def load_policy(path: str | Path, device: str = "auto", dtype: str = "auto"):
    """Load ``(model, tokenizer)`` from a local directory; the model is put on ``device``.

    A LoRA adapter (a LoRA run's checkpoint) loads as its base model with the adapter merged in: a plain
    model that evaluates, generates and saves like any other."""
    p = check_model_dir(path)
    if is_adapter_dir(p):
        model, tok = load_policy(adapter_base(p), device, dtype)
        try:
            if (p / "tokenizer_config.json").exists():  # checkpoints keep the tokenizer next to the adapter
                tok = load_tokenizer(p)
            return PeftModel.from_pretrained(model, str(p)).merge_and_unload(), tok
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UserError(f"cannot load the LoRA adapter in {str(p)!r}: {first}") from None
    quiet_transformers()
    device = resolve_device(device)
    try:
        tok = load_tokenizer(p)
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=resolve_dtype(dtype, device))
    except (OSError, ValueError, KeyError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot load model from {str(p)!r}: {first}") from None
    model.to(device)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
