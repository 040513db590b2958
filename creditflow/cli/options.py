"""What several commands share: option help texts and options, the one step from flags to ``key=value``
overrides, and the checks of file options made before any work."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, Iterable, Optional

import typer

from creditflow.config import setting
from creditflow.errors import UserError

ENV_HELP = ("Environment (env.name): a name `creditflow envs` lists (built-in or plug-in), <adapter>:<spec>, or "
            "module:Class.")
OVERRIDES_HELP = "Config overrides as key=value (e.g. rl.lr=1e-5 rollout.group_size=8 env.kwargs.size=7)."

# generation backend options shared by ``eval`` and ``rro collect`` (one OptionInfo serves both commands)
BACKEND = typer.Option(None, "--backend", help="Generation backend (policy.backend): hf, vllm or openai.")
BASE_URL = typer.Option(None, "--base-url", help="backend openai: server API root, e.g. http://127.0.0.1:8000/v1.")
MODEL_NAME = typer.Option(None, "--model-name", help="backend openai: the model's name on the server.")


def backend_flags(backend: Optional[str], base_url: Optional[str], model_name: Optional[str]) -> dict[str, Any]:
    """The backend options by the config key each sets."""
    return {"policy.backend": backend, "policy.base_url": base_url, "policy.model_name": model_name}


def config_overrides(flags: dict[str, Any], given: Optional[Iterable[str]] = None, prefix: str = "") -> list[str]:
    """A command's ``key=value`` overrides: first each flag the user gave (``{config key: value}``; None: not
    given, the config's value stays) as a setting whose value is taken literally (``--out 2024`` is the text
    "2024"), then the ``key=value`` arguments, typed as YAML, each behind ``prefix`` (``env.kwargs.`` for env
    options), so that they win over the flags."""
    return [*(setting(key, value) for key, value in flags.items() if value is not None),
            *(prefix + item for item in given or ())]


def check_output_file(path: Path, option: str) -> None:
    """An output file path that can be written, checked before any work: not a directory, and its nearest
    existing parent a writable directory (for a symbolic link, the file it points to, which is written)."""
    if path.is_dir():
        raise UserError(f"{option} {str(path)!r} is a directory; give a file path")
    try:
        os.path.realpath(path, strict=True)
    except OSError as exc:  # a loop of symbolic links (a new file, or a link to one, is fine)
        if exc.errno == errno.ELOOP:
            raise UserError(f"{option} {str(path)!r}: {exc.strerror}") from None
    parent = Path(os.path.realpath(path)).parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{option} {str(path)!r}: {str(parent)!r} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {str(path)!r}: cannot write in {str(parent)!r} (permission denied)")


def check_input(path: Path) -> None:
    """``--in`` is an existing file: one line otherwise."""
    if path.is_dir():
        raise UserError(f"--in {str(path)!r}: is a directory, not a JSONL file")
    if not path.exists():
        raise UserError(f"--in {str(path)!r}: no such file")


def write_out(path: Path, write):
    """Return ``write()``; an OS error (disk full, permissions) is one line naming ``--out``."""
    try:
        return write()
    except OSError as exc:
        raise UserError(f"--out {str(path)!r}: cannot write ({exc.strerror or exc})") from None


def csv(text: str, option: str, kind=str) -> list:
    """A comma-separated option's values as ``kind``; one line naming ``option`` when one is not, or when there
    is none (``--parts ''``, ``--estimators ,``)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"{option} {text!r}: give at least one value (comma-separated)")
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise UserError(f"{option}: expected comma-separated {kind.__name__} values, got {text!r}") from None
