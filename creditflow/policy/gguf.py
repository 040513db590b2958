"""A GGUF file (llama.cpp's format) as a Hugging Face model directory that every command loads.

transformers reads GGUF files itself (``from_pretrained(dir, gguf_file=...)``, through the ``gguf`` package):
it dequantises the tensors (Q4_1, Q8_0, ...) to the requested dtype and rebuilds the tokenizer, its special
tokens and its chat template from the file's metadata. :func:`convert_gguf` does that once and saves the
result with ``save_pretrained`` (config, safetensors, tokenizer with its chat template, generation config), so
``creditflow train --model``, ``sft``, ``eval``, ``rro``, ``export``, PEFT and vLLM load it like any other local
checkpoint. The architectures are transformers' (LLaMA, Qwen2, Mistral, Gemma, Phi-3, ...): one it cannot read
from GGUF is a one-line error. A record of where the weights came from (file name, size, sha256, dtype) is
saved next to them as ``creditflow_gguf.json``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from creditflow.atomic import atomic_dir
from creditflow.errors import UserError

MAGIC = b"GGUF"  # the first four bytes of every GGUF file
RECORD = "creditflow_gguf.json"
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16", "auto": "float32"}


def check_gguf_file(path: str | Path) -> Path:
    """``path`` is a readable GGUF file (by its magic bytes), or a one-line UserError saying what it is."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"--from-gguf {str(p)!r} does not exist")
    if p.is_dir():
        raise UserError(f"--from-gguf {str(p)!r} is a directory; give the .gguf file")
    try:
        with open(p, "rb") as fh:
            head = fh.read(4)
    except PermissionError:
        raise UserError(f"--from-gguf {str(p)!r}: permission denied") from None
    except OSError as exc:
        raise UserError(f"--from-gguf {str(p)!r}: cannot read ({exc.strerror or exc})") from None
    if head != MAGIC:
        raise UserError(f"--from-gguf {str(p)!r} is not a GGUF file (it does not start with 'GGUF')")
    return p


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def load_gguf(path: str | Path, dtype: str = "float32"):
    """``(model, tokenizer)`` read from the GGUF file at ``path``, dequantised to ``dtype`` on the CPU: a plain
    transformers model (no quantisation config left) and its tokenizer with the file's chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    p = check_gguf_file(path)
    if dtype not in DTYPES:
        raise UserError(f"--dtype must be one of {', '.join(sorted(DTYPES))}; got {dtype!r}")
    if importlib.util.find_spec("gguf") is None:
        raise UserError("reading a GGUF file needs the gguf package: pip install 'creditflow[gguf]' (or gguf>=0.10)")
    hf_logging.disable_progress_bar()
    where, name = str(p.resolve().parent), p.name
    try:
        tok = AutoTokenizer.from_pretrained(where, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=getattr(torch, DTYPES[dtype]))
    except Exception as exc:  # noqa: BLE001 - a damaged file fails in the reader with struct, index, value errors...
        raise UserError(f"--from-gguf {str(p)!r}: transformers cannot read it ({type(exc).__name__}: "
                        f"{_first_line(exc)})") from None
    # the weights are dequantised: what is saved is a plain model, which must not claim a GGUF quantisation
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    gen = model.generation_config
    if gen.eos_token_id is None:
        gen.eos_token_id = tok.eos_token_id
    if gen.pad_token_id is None:
        gen.pad_token_id = tok.pad_token_id
    return model, tok


def convert_gguf(path: str | Path, out: str | Path, dtype: str = "float32") -> Path:
    """Write the model in the GGUF file ``path`` to the new directory ``out`` as a Hugging Face model directory
    (atomically: all of it or nothing), dequantised to ``dtype`` (``auto``: float32)."""
    p = check_gguf_file(path)
    model, tok = load_gguf(p, dtype)
    target = Path(out)
    try:
        with atomic_dir(target) as tmp:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            record = {"converted_from": p.name, "bytes": os.path.getsize(p), "sha256": sha256(p),
                      "dtype": DTYPES[dtype], "architecture": type(model).__name__,
                      "parameters": sum(t.numel() for t in model.parameters())}
            (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    except OSError as exc:
        raise UserError(f"--out {str(target)!r}: cannot write ({exc.strerror or exc})") from None
    return target
