"""Model directories checked before any work: a local Hugging Face model or LoRA adapter whose config,
tokenizer and weights are readable and fit together, or a one-line UserError naming the file at fault.

The checks read headers and configs only (the architecture is built on the meta device), and a directory that
passed is not checked again until one of its files changes.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from creditflow.errors import UserError

ADAPTER_CONFIG = "adapter_config.json"  # what PEFT saves next to a LoRA adapter's weights


def quiet_transformers() -> None:
    """No per-file progress bars from transformers' save/load (they clutter CLI output and logs); every module of
    ``policy`` that loads or saves through transformers calls it."""
    hf_logging.disable_progress_bar()


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
    quiet_transformers()
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
