"""Load any local Hugging Face causal LM, or build the built-in tiny default.

The tiny default is a small Qwen2-architecture model initialised from a config, with a byte-level BPE
tokenizer trained locally (``tokenizers``) on the environment's text rendered through the prompt
template, plus a ChatML chat template. It is saved with ``save_pretrained`` so transformers, PEFT and
vLLM load it like any other checkpoint. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import warnings
import zipfile
from pathlib import Path
from typing import Iterable, Iterator

import torch
from peft import PeftModel
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (AttentionInterface, AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM)
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.utils import logging as hf_logging

from creditflow.atomic import atomic_dir, crash_point
from creditflow.errors import UserError

ADAPTER_CONFIG = "adapter_config.json"  # what PEFT saves next to a LoRA adapter's weights

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<action>", "</action>"]

# ChatML, as Qwen2 uses it; generation prompt opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TINY_DEFAULTS = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rope_theta=10000.0,
    tie_word_embeddings=True,
)


# transformers 5 deprecated ``is_gradient_checkpointing``, which PEFT and TRL still read (PEFT once a wrap, TRL's
# trainers every step): nothing a creditflow user can act on, so the calls creditflow makes hide it
DEPRECATIONS_OF_OTHERS = r"`is_gradient_checkpointing` is deprecated"


@contextlib.contextmanager
def others_deprecations_hidden() -> Iterator[None]:
    """Run a block without the FutureWarnings in :data:`DEPRECATIONS_OF_OTHERS` (PEFT's and TRL's, not ours)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=DEPRECATIONS_OF_OTHERS, category=FutureWarning)
        yield


def _quiet_transformers() -> None:
    """No per-file progress bars from transformers' save/load (they clutter CLI output and logs)."""
    hf_logging.disable_progress_bar()


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


def autocast_note(device: str, autocast: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """A one-line note when ``policy.autocast=bf16`` will run on a CPU without native bfloat16, where every bf16
    product is emulated: the RL step of step_cost.py took 4.5x (conversation) to 6.1x (window) longer than in
    float32 on such a host (AVX2 only, benchmarks/results/step_cost_1201.md)."""
    if autocast == "none" or resolve_device(device) != "cpu" or cpu_has_native_bf16(cpuinfo) is not False:
        return None
    return (f"note: policy.autocast={autocast} on a CPU without AVX-512 BF16 or AMX: bfloat16 is emulated here and "
            "runs several times slower than float32 (policy.autocast=none)")


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


def check_model_dir(path: str | Path, weights: bool = True) -> Path:
    """A local HF model directory checked before any work, or a one-line UserError naming the file at fault:
    the directory missing, not a directory or unreadable; ``config.json`` missing or not a UTF-8 JSON object;
    no tokenizer files, one that is not JSON or a tokenizer that does not load, or one with more tokens than
    the config's ``vocab_size``; and (``weights``) no weights file, a weights file that is truncated or not
    what its name says, or tensors whose names and shapes do not fit the architecture ``config.json``
    describes. A LoRA checkpoint (``adapter_config.json``, no ``config.json``) counts when the base model it
    names does and its adapter weights are readable. ``weights=False``: a local copy for a served model,
    where only the config and the tokenizer are read. Checked once per state of the directory's files."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"model path {str(p)!r} does not exist")
    if not p.is_dir():
        if _is_gguf(p):
            raise UserError(f"model path {str(p)!r} is a GGUF file; convert it once with `creditflow export "
                            f"--from-gguf {p} --out DIR` and give DIR")
        raise UserError(f"model path {str(p)!r} is not a directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise UserError(f"model path {str(p)!r}: permission denied")
    config = p / "config.json"
    if not config.exists() and (p / ADAPTER_CONFIG).exists():
        base = adapter_base(p)
        try:
            check_model_dir(base, weights)
        except UserError as exc:
            raise UserError(f"LoRA adapter {str(p)!r}: its base model: {exc}") from None
        if weights:
            _check_adapter_weights(p)
        return p
    if not config.exists():
        raise UserError(f"model path {str(p)!r} has no config.json (not a Hugging Face model directory)")
    _read_json_object(config)
    key = (str(p.resolve()), weights, _files_state(p))
    if key not in _CHECKED:
        _check_model_files(p, weights)
        _CHECKED.add(key)
    return p


def _is_gguf(p: Path) -> bool:
    try:
        with open(p, "rb") as fh:
            return fh.read(4) == b"GGUF"
    except OSError:
        return False


_CHECKED: set[tuple] = set()  # directories (with the state of their files) that passed the deep checks

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
"""Files of which a saved tokenizer has at least one (fast tokenizers, SentencePiece, BPE, WordPiece)."""
JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
"""What ``save_pretrained`` writes for the weights (one file, or an index naming the shards)."""


def _files_state(p: Path) -> tuple:
    """(name, size, mtime) of every file in ``p``: a changed file means checking again."""
    try:
        return tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(p) if e.is_file()))
    except OSError:
        return ()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _check_model_files(p: Path, weights: bool) -> None:
    """The deep checks of :func:`check_model_dir` for a directory with a ``config.json``."""
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{p}: no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save one next to the model "
                        "with tokenizer.save_pretrained")
    for name in JSON_FILES:
        if (p / name).exists():
            _read_json_object(p / name)
    config = model_config(p)
    _quiet_transformers()
    try:
        tok = AutoTokenizer.from_pretrained(str(p))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises bare Exceptions for broken files
        raise UserError(f"{p}: the tokenizer does not load ({_first_line(exc)})") from None
    vocab = getattr(config, "vocab_size", None) or getattr(getattr(config, "text_config", None), "vocab_size", None)
    if isinstance(vocab, int) and len(tok) > vocab:
        raise UserError(f"{p / 'config.json'}: vocab_size is {vocab} but the tokenizer has {len(tok)} tokens (the "
                        f"embedding has no row for ids >= {vocab})")
    if weights:
        _check_weights(p, config)


def _check_weights(p: Path, config) -> None:
    """A weights file exists, reads, and its tensors fit the architecture of ``config``."""
    present = [name for name in WEIGHT_FILES if (p / name).is_file()]
    if not present:
        raise UserError(f"{p}: no weights (none of {', '.join(WEIGHT_FILES)})")
    name = present[0]
    if name.endswith(".index.json"):
        weight_map = _read_json_object(p / name).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise UserError(f"{p / name}: no weight_map (which shard holds which tensor?)")
        shards = sorted(set(map(str, weight_map.values())))
        missing = [s for s in shards if not (p / s).is_file()]
        if missing:
            raise UserError(f"{p / missing[0]}: missing ({name} names {len(shards)} shards)")
    else:
        shards = [name]
    if not name.startswith("model.safetensors"):
        for shard in shards:
            _check_zip(p / shard)
        return
    tensors: dict[str, tuple] = {}
    for shard in shards:
        tensors.update(safetensors_header(p / shard))
    _check_shapes(p / name, tensors, config)


def safetensors_header(path: Path, exact: bool = False) -> dict[str, tuple]:
    """``{tensor name: shape}`` from the header of a safetensors file, checked against the file's size (a
    truncated file is a one-line UserError naming it; ``exact``: any other length too, as a checkpoint written
    by creditflow must be); reads the header only."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2 or n > size - 8:
                raise UserError(f"{path}: not a safetensors file, or truncated ({size} bytes)")
            header = json.loads(fh.read(n))
        tensors = {k: v for k, v in header.items() if k != "__metadata__"}
        end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
        shapes = {k: tuple(int(d) for d in v["shape"]) for k, v in tensors.items()}
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, IndexError, AttributeError):
        raise UserError(f"{path}: not a safetensors file (its header does not parse)") from None
    if 8 + n + end > size or (exact and 8 + n + end != size):
        raise UserError(f"{path}: has {size} bytes, its header says {8 + n + end}")
    return shapes


def _check_zip(path: Path) -> None:
    """A PyTorch ``.bin`` checkpoint (a zip archive since torch 1.6) whose directory reads: a truncated
    file loses the directory at its end. An old pickle-only file is left to torch."""
    try:
        with open(path, "rb") as fh:
            zipped = fh.read(4) == b"PK\x03\x04"
        if zipped:
            zipfile.ZipFile(path).close()
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except zipfile.BadZipFile:
        raise UserError(f"{path}: truncated or damaged (its zip directory does not read)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _check_shapes(path: Path, tensors: dict[str, tuple], config) -> None:
    """The tensors of the weights files (``path`` names them) against the architecture of ``config``, built
    on the meta device (no memory): a tensor with another shape, or tensors the model needs that are absent
    (tied ones aside), is a UserError. Names that follow another scheme (older checkpoints that transformers
    renames when loading) are left to transformers."""
    try:
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # noqa: BLE001 - an architecture transformers cannot build: from_pretrained says why
        raise UserError(f"{path.parent / 'config.json'}: transformers cannot build this model ({_first_line(exc)})") \
            from None
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    prefix = getattr(skeleton, "base_model_prefix", "") + "."
    if prefix != "." and not any(k.startswith(prefix) for k in tensors) and any(k.startswith(prefix) for k in expected):
        tensors = {prefix + k: v for k, v in tensors.items()}  # the base model's weights alone
    for name, shape in tensors.items():
        if name in expected and expected[name] != shape:
            raise UserError(f"{path}: tensor {name} has shape {list(shape)}, but config.json describes "
                            f"{list(expected[name])}")
    tied = set(getattr(skeleton, "all_tied_weights_keys", None) or {})
    missing = sorted(set(expected) - set(tensors) - tied)
    unknown = set(tensors) - set(expected)
    if missing and not unknown:
        raise UserError(f"{path}: {len(missing)} of the {len(expected)} tensors config.json describes are missing "
                        f"(first: {missing[0]})")


def _check_adapter_weights(p: Path) -> None:
    """A LoRA adapter's weights file exists and reads."""
    for name in ("adapter_model.safetensors", "adapter_model.bin"):
        if (p / name).is_file():
            if name.endswith(".safetensors"):
                safetensors_header(p / name)
            else:
                _check_zip(p / name)
            return
    raise UserError(f"{p}: LoRA adapter without weights (no adapter_model.safetensors)")


def _read_json_object(path: Path) -> dict:
    """A UTF-8 JSON object from ``path``, or a one-line UserError saying what is wrong with the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, not a file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def is_adapter_dir(path: str | Path) -> bool:
    """A LoRA adapter saved by PEFT (a LoRA run's checkpoint): ``adapter_config.json`` and no ``config.json``."""
    p = Path(path).expanduser()
    return (p / ADAPTER_CONFIG).is_file() and not (p / "config.json").exists()


def adapter_base(path: str | Path) -> Path:
    """The base model directory a LoRA adapter names (``base_model_name_or_path`` of its
    ``adapter_config.json``; creditflow writes it as an absolute path)."""
    config = Path(path).expanduser() / ADAPTER_CONFIG
    base = _read_json_object(config).get("base_model_name_or_path")
    if not base:
        raise UserError(f"{config}: no base_model_name_or_path (which model is this adapter for?)")
    return Path(base)


def weights_dir(path: str | Path) -> Path:
    """The directory with the full weights and config.json of the policy at ``path``: the base model of a
    LoRA adapter (followed down when that is an adapter too), else ``path`` itself (what a vLLM engine starts
    from)."""
    return weights_dir(adapter_base(path)) if is_adapter_dir(path) else Path(path).expanduser()


def model_config(path: str | Path):
    """The transformers config of the model at ``path`` (of its base model for a LoRA adapter)."""
    p = weights_dir(path)
    try:
        return AutoConfig.from_pretrained(str(p))
    except Exception as exc:  # noqa: BLE001 - transformers' config checks raise several kinds of errors
        raise UserError(f"{p / 'config.json'}: cannot load the model config ({_first_line(exc)})") from None


def tiny_config(**overrides) -> Qwen2Config:
    """The architecture of the tiny default (its vocabulary is only known once the tokenizer is trained)."""
    return Qwen2Config(vocab_size=len(SPECIAL_TOKENS) + 256, **{**TINY_DEFAULTS, **overrides})


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
    _quiet_transformers()
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


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024, isolate_chars: str = "", lowercase: bool = False,
                    words: Iterable[str] = ()):
    """Byte-level BPE trained on ``texts``; returns a ``PreTrainedTokenizerFast`` with ChatML.

    ``isolate_chars`` (e.g. Sokoban's grid symbols) are always split into tokens of their own, so a grid
    cell is one token and positions line up across rows. ``lowercase`` folds case before tokenizing (the
    special tokens are left alone), so a word or ID reads as the same tokens whether a page capitalises it
    or not; decoding then gives lower-case text. ``words`` (e.g. a catalog's product IDs) become one token
    each on top of ``vocab_size``, matched before BPE (after the case folding) wherever they occur.
    """

    bpe = Tokenizer(models.BPE())
    if lowercase:
        bpe.normalizer = normalizers.Lowercase()
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if isolate_chars:
        pattern = "[" + "".join("\\" + c if c in "\\]^-[" else c for c in isolate_chars) + "]"
        bpe.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pattern), behavior="isolated"), byte_level])
    else:
        bpe.pre_tokenizer = byte_level
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    words = sorted(set(words))
    if words:
        tok.add_tokens([AddedToken(w, normalized=True, single_word=False) for w in words])
    return tok


TINY_RECORD = "creditflow.json"  # what build_tiny_policy records next to the model; written last


def tiny_model_built(path: str | Path) -> bool:
    """``path`` holds a whole tiny policy built by :func:`build_tiny_policy` (its record is written last; the
    directory appears at once, and a partial one from a killed older version has no record)."""
    return (Path(path) / TINY_RECORD).is_file() and (Path(path) / "config.json").is_file()


def build_tiny_policy(out_dir: str | Path, corpus: Iterable[str], vocab_size: int = 1024, seed: int = 0,
                      isolate_chars: str = "", lowercase: bool = False, words: Iterable[str] = (),
                      **config_overrides):
    """Train a tokenizer on ``corpus``, initialise a small Qwen2 model, save both to ``out_dir`` (atomically:
    the directory appears with the weights, the tokenizer and the record, or not at all)."""
    out = Path(out_dir)
    _quiet_transformers()
    tok = train_tokenizer(corpus, vocab_size=vocab_size, isolate_chars=isolate_chars, lowercase=lowercase,
                          words=words)
    params = {**TINY_DEFAULTS, **config_overrides}
    # Init std ~ 1/sqrt(hidden) (0.088 at 128) instead of Qwen2's 0.02: with 0.02 a from-scratch model this
    # small sits on a long plateau where attention stays uniform and the action ignores the observation
    # (measured: 400 SFT steps at chance level vs. 70% action accuracy after 100 steps).
    params.setdefault("initializer_range", params["hidden_size"] ** -0.5)
    config = Qwen2Config(
        vocab_size=len(tok),
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **params,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, do_sample=True, temperature=1.0, top_p=1.0
    )
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        crash_point("tiny.model")
        tok.save_pretrained(tmp)
        (tmp / TINY_RECORD).write_text(json.dumps({"built_by": "creditflow.build_tiny_policy", "seed": seed,
                                                   "vocab_size": len(tok), **params}, indent=2))
    return model, tok


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
