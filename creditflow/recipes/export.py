"""The ``export`` recipe: a saved policy as a plain Hugging Face model directory.

A LoRA run's checkpoints hold an adapter, not a model; vLLM servers, other trainers and most tools want a
model. ``export`` loads the adapter onto its base model, merges it and saves the result; a full checkpoint
is saved without its optimizer and trainer state. ``creditflow eval`` needs no export: it merges on load.
``export --from-gguf FILE`` writes the model of a GGUF file (llama.cpp's format) as such a directory
(``creditflow/policy/gguf.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import get_args

from creditflow.atomic import atomic_dir
from creditflow.config import PolicyConfig
from creditflow.errors import UserError
from creditflow.policy import gguf, inference
from creditflow.policy.load import load_policy
from creditflow.policy.validate import check_model_dir
from creditflow.trainer.checkpoint import policy_in


def export_policy(source: str | Path, out: str | Path, dtype: str = "auto") -> Path:
    """Write the policy in ``source`` (a checkpoint, a LoRA adapter, a model directory, or a run directory: its
    newest checkpoint) to the new directory ``out`` as a plain HF model + tokenizer, merged on the CPU in
    ``dtype`` (``auto``: float32)."""
    target = _check_out(out, dtype)
    source = policy_in(source)
    check_model_dir(source)
    model, tok = load_policy(source, "cpu", dtype)
    try:
        with atomic_dir(target) as tmp:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            found = inference.load(source)  # the prompt layout travels on (a checkpoint's: its run's)
            if found:
                inference.save(tmp, settings=found[0])
    except OSError as exc:
        raise UserError(f"--out {str(target)!r}: cannot write ({exc.strerror or exc})") from None
    return target


def model_from_gguf(path: str | Path, out: str | Path, dtype: str = "auto") -> Path:
    """Write the model of the GGUF file ``path`` to the new directory ``out`` as a plain HF model + tokenizer
    (with the file's chat template), dequantised to ``dtype`` (``auto``: float32)."""
    target = _check_out(out, dtype)
    gguf.check_gguf_file(path)
    return gguf.convert_gguf(path, target, dtype)


def _check_out(out: str | Path, dtype: str) -> Path:
    """``--dtype`` is one of the policy's dtypes and ``--out`` a new directory that can be written (checked
    before any work)."""
    dtypes = get_args(PolicyConfig.model_fields["dtype"].annotation)
    if dtype not in dtypes:
        raise UserError(f"--dtype must be one of {', '.join(dtypes)}; got {dtype!r}")
    target = Path(out)
    if target.exists():
        raise UserError(f"--out {str(target)!r} already exists; give a new directory")
    parent = target.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"--out {str(target)!r}: cannot write in {str(parent)!r}")
    return target
