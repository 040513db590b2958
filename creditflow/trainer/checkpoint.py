"""Checkpoints: model (save_pretrained), optimizer, RNG states, loop state and hook buffers.

Layout: ``<run>/checkpoints/step_000010/`` with the HF model + tokenizer, ``optimizer.pt``,
``trainer_state.pt`` and ``manifest.json`` (the step and every file's size and SHA-256); ``<run>/checkpoints/latest``
names the newest. A checkpoint is written into ``.step_000010.tmp``, flushed to disk and renamed: a crash
never leaves a partial ``step_*`` directory. Under N processes rank 0 writes it (the policy and optimizer are
the same everywhere; ``trainer_state.pt`` holds every process's RNG states) while the others wait, and every
process loads it on ``--resume``.

``--resume`` takes the newest *intact* checkpoint (:func:`resume_checkpoint`): one whose files match its
manifest. A damaged one (a truncated or rewritten file, a missing one) is skipped with one line saying why,
and the previous one is used. Checkpoints from before manifests existed are checked by reading them: each
file must load (``trainer_state.pt``, ``optimizer.pt``, the JSON files) and each safetensors file must be
as long as its header says.

``checkpoint.keep_last`` checkpoints are kept (default 2; each new one removes the older ones), and with
``checkpoint.optimizer=newest`` (the default) only the newest holds ``optimizer.pt``: once a new checkpoint is
published, the one before loses it (its manifest is rewritten first, then the file goes, so a kill in between
leaves an extra file, not damage). Such a weights-only checkpoint is what ``eval`` and ``export`` take, and a
resume that falls back to it (the newest damaged) starts AdamW's moments afresh and says so.

A LoRA policy (``policy.lora``) saves as PEFT does: ``adapter_model.safetensors`` and
``adapter_config.json``, whose ``base_model_name_or_path`` is the absolute path of the base model (π_SFT),
never changed by training; ``optimizer.pt`` then holds the adapter's parameters' state only. ``--resume``
puts the adapter back on the base; ``creditflow eval`` and ``creditflow export`` load it merged.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from creditflow.atomic import crash_point, publish_dir, temporary_dir, write_atomic
from creditflow.errors import UserError
from creditflow.policy import inference
from creditflow.policy.validate import safetensors_header
from creditflow.trainer.distributed import barrier

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "creditflow-checkpoint/1"  # Manifest.format
_STEP_DIR = re.compile(r"step_(\d+)")


class _FileFacts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bytes: StrictInt = Field(ge=0)
    sha256: StrictStr = Field(pattern=r"^[0-9a-f]{64}$")


class Manifest(BaseModel):
    """The schema of ``manifest.json``: anything else (a missing key, ``"files": []``, a size that is no
    integer, a file name that leaves the checkpoint) is a damaged checkpoint."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["creditflow-checkpoint/1"]
    step: StrictInt = Field(ge=0)
    files: dict[StrictStr, _FileFacts]

    @field_validator("files")
    @classmethod
    def _every_checkpoint_file(cls, files: dict) -> dict:
        if "trainer_state.pt" not in files:  # optimizer.pt: only in the checkpoints that keep it
            raise ValueError("lists no trainer_state.pt")
        for name in files:
            if not name or Path(name).is_absolute() or ".." in Path(name).parts or name == MANIFEST:
                raise ValueError(f"names {name!r}, which is not a file of the checkpoint")
        return files


def read_manifest(path: Path) -> Manifest | None:
    """The manifest of the checkpoint directory ``path`` when it reads and has the schema, else None."""
    try:
        manifest = Manifest.model_validate_json((Path(path) / MANIFEST).read_bytes())
    except (OSError, ValueError, ValidationError):  # ValidationError: any mismatch with the schema
        return None
    return manifest


def checkpoint_root(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def save_checkpoint(trainer, keep: int | None = None, optimizer: str | None = None) -> Path:
    """Write the trainer's checkpoint; every process calls it (``trainer.world``), rank 0 writes. The
    metrics logged so far are flushed to disk first, so a checkpoint never outlives its metric rows. ``keep``
    (the newest kept; None: every one) and ``optimizer`` (``newest`` or ``all``: which keep ``optimizer.pt``)
    default to the run's ``checkpoint`` settings."""
    world = trainer.world
    settings = trainer.cfg.checkpoint
    keep = settings.keep_last if keep is None else keep
    optimizer = optimizer or settings.optimizer
    state = trainer.state_dict()  # under N processes a collective: it gathers every process's RNG states
    root = checkpoint_root(trainer.out_dir)
    name = f"step_{trainer.step:06d}"
    final = root / name
    if not world.main:
        barrier(world)  # until rank 0 has written it
        return final
    sync = getattr(trainer.logger, "sync", None)
    if sync is not None:
        sync()
    for stale in root.glob(".step_*"):  # a checkpoint being written or removed by a killed process
        shutil.rmtree(stale, ignore_errors=True)
    tmp = temporary_dir(final)
    try:
        trainer.model.save_pretrained(tmp)
        crash_point("checkpoint.model")
        trainer.tok.save_pretrained(tmp)
        # the prompt layout the policy is trained with (eval, export read it)
        inference.save(tmp, inference.settings_of(trainer.cfg.policy, trainer.cfg.rollout))
        crash_point("checkpoint.tokenizer")
        torch.save(trainer.optimizer.state_dict(), tmp / "optimizer.pt")
        crash_point("checkpoint.optimizer")
        torch.save(state, tmp / "trainer_state.pt")
        crash_point("checkpoint.state")
        write_manifest(tmp, trainer.step)
        crash_point("checkpoint.manifest")
        publish_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    crash_point("checkpoint.published")
    write_atomic(root / "latest", name)
    crash_point("checkpoint.latest")
    older = [path for _, path in _step_dirs(root) if path != final]
    for old in older[: max(0, len(older) - (keep - 1))] if keep is not None else []:
        gone = old.with_name(f".{old.name}.old")  # renamed first: a kill mid-removal leaves no step_* part
        old.rename(gone)
        crash_point("checkpoint.pruned")
        shutil.rmtree(gone)
    if optimizer == "newest":
        for old in (path for _, path in _step_dirs(root) if path != final):
            drop_optimizer_state(old)
    barrier(world)
    return final


def drop_optimizer_state(path: Path) -> bool:
    """Remove ``optimizer.pt`` from the checkpoint ``path`` (a newer one holds the state ``--resume`` needs): its
    manifest is rewritten without it first, so a kill in between leaves an unlisted file, never damage. Nothing
    happens to a checkpoint without a manifest (from before manifests) or without the file; True when removed."""
    manifest = read_manifest(path)
    if manifest is None or "optimizer.pt" not in manifest.files:
        return False
    files = {name: facts.model_dump() for name, facts in manifest.files.items() if name != "optimizer.pt"}
    data = {"format": MANIFEST_FORMAT, "step": manifest.step, "files": files}
    write_atomic(path / MANIFEST, json.dumps(data, indent=1) + "\n")
    crash_point("checkpoint.optimizer_dropped")
    (path / "optimizer.pt").unlink(missing_ok=True)
    return True


def has_optimizer_state(path: str | Path) -> bool:
    """Whether the checkpoint ``path`` holds AdamW's state: listed in its manifest (or, for a checkpoint from
    before manifests, there)."""
    manifest = read_manifest(Path(path))
    if manifest is None:
        return (Path(path) / "optimizer.pt").is_file()
    return "optimizer.pt" in manifest.files


def checkpoint_size(path: str | Path) -> tuple[int, int]:
    """``(bytes of the checkpoint directory, bytes of its optimizer.pt)``."""
    files = [f for f in Path(path).rglob("*") if f.is_file()]
    total = sum(f.stat().st_size for f in files)
    opt = Path(path) / "optimizer.pt"
    return total, (opt.stat().st_size if opt.is_file() else 0)


def human_bytes(n: int) -> str:
    """``1.6 GB``, ``310 MB``, ``12 kB`` (powers of 1000, as ``du --si`` and file managers show them)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.{1 if n < 10 * size else 0}f} {unit}"
    return f"{n} B"


# -- manifest and verification ------------------------------------------------------------------------


def write_manifest(path: str | Path, step: int) -> dict:
    """``manifest.json`` in the checkpoint directory ``path``: the step and each file's size and SHA-256."""
    path = Path(path)
    files = {str(f.relative_to(path)): {"bytes": f.stat().st_size, "sha256": _sha256(f)}
             for f in sorted(path.rglob("*")) if f.is_file() and f.name != MANIFEST}
    manifest = {"format": MANIFEST_FORMAT, "step": int(step), "files": files}
    write_atomic(path / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checkpoint_problem(path: str | Path) -> str | None:
    """None when the checkpoint directory ``path`` is intact, else what is wrong with it (a phrase naming
    the file). With a manifest: every file it lists is there with its size and SHA-256. Without one (a
    checkpoint from before manifests): every file a checkpoint needs is there and reads."""
    p = Path(path)
    if not p.is_dir():
        return "missing"
    if not (p / MANIFEST).exists():
        return _legacy_problem(p)
    manifest = read_manifest(p)
    if manifest is None:
        return f"{MANIFEST} is unreadable or not a checkpoint manifest"
    for name, facts in manifest.files.items():
        f = p / name
        if not f.is_file():
            return f"{name} is missing"
        size = f.stat().st_size
        if size != facts.bytes:
            return f"{name} has {size} bytes, its manifest says {facts.bytes}"
        if _sha256(f) != facts.sha256:
            return f"{name} does not match its SHA-256 in {MANIFEST}"
    return None


def _legacy_problem(p: Path) -> str | None:
    """A checkpoint without a manifest: the files a checkpoint needs, each read once (``optimizer.pt`` where it
    is: a checkpoint whose manifest is lost may be one that kept no optimizer state)."""
    for name in ("trainer_state.pt", "optimizer.pt"):
        if name == "optimizer.pt" and not (p / name).exists():
            continue
        if not (p / name).is_file():
            return f"{name} is missing"
        try:
            torch.load(p / name, map_location="cpu", weights_only=False)
        except Exception as exc:  # torch.load raises what the unpickler meets: any error means unreadable
            return f"{name} is unreadable ({type(exc).__name__})"
    config = "adapter_config.json" if (p / "adapter_config.json").exists() else "config.json"
    for name in (config, "tokenizer_config.json"):
        if not (p / name).is_file():
            return f"{name} is missing"
        try:
            json.loads((p / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return f"{name} is unreadable"
    weights = sorted(p.glob("*.safetensors"))
    if not weights and not (p / "pytorch_model.bin").is_file():
        return "no weights file (*.safetensors)"
    for f in weights:
        problem = safetensors_problem(f)
        if problem:
            return f"{f.name} {problem}"
    return None


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file of a checkpoint (None: nothing): an 8-byte header length, a JSON
    header and the tensors' bytes, whose extent the header gives, so the file must be exactly that long."""
    try:
        safetensors_header(path, exact=True)
    except UserError as exc:
        return str(exc).removeprefix(f"{path}: ")
    return None


# -- finding checkpoints ------------------------------------------------------------------------------


@dataclass
class Found:
    """The checkpoint a resume continues from, and the newer ones skipped as damaged (path, why)."""

    path: Path
    step: int
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    def note(self) -> str | None:
        """One line on the skipped checkpoints (None when the newest was intact), and on a fallback that holds no
        optimizer state."""
        if not self.skipped:
            return None
        damaged = "; ".join(f"{p.name}: {why}" for p, why in self.skipped)
        fresh = "" if has_optimizer_state(self.path) else (
            " (it keeps no optimizer state, checkpoint.optimizer=newest: AdamW's moments start afresh, so the "
            "steps after it are not those of an uninterrupted run)")
        return f"note: checkpoint damaged ({damaged}); resuming from {self.path.name}, the newest intact one{fresh}"


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step_N`` directory under ``root``, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.fullmatch(p.name)) and p.is_dir()]
    return sorted(found)


def newest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest ``step_*`` directory of the run in ``out_dir`` (not verified), None when there is none."""
    found = _step_dirs(checkpoint_root(out_dir))
    return found[-1][1] if found else None


def resume_checkpoint(out_dir: str | Path) -> Found | None:
    """The newest intact checkpoint of the run in ``out_dir`` (None when it has no checkpoint yet); when
    every checkpoint is damaged, a one-line UserError listing why."""
    skipped = []
    for step, path in reversed(_step_dirs(checkpoint_root(out_dir))):
        problem = _checked(path)
        if problem is None:
            return Found(path, checkpoint_step(path), skipped)
        skipped.append((path, problem))
    if not skipped:
        return None
    listed = "; ".join(f"{p.name}: {why}" for p, why in skipped)
    raise UserError(f"{checkpoint_root(out_dir)}: no intact checkpoint ({listed})")


_VERIFIED: dict[tuple, str | None] = {}  # (path, stat of its files) -> problem: a resume checks each once


def _checked(path: Path) -> str | None:
    key = (str(path.resolve()), tuple(sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                                             for f in path.rglob("*") if f.is_file())))
    if key not in _VERIFIED:
        _VERIFIED[key] = checkpoint_problem(path)
    return _VERIFIED[key]


def latest_checkpoint(out_dir: str | Path) -> Path:
    """The newest intact checkpoint of the run in ``out_dir``; none is a one-line UserError."""
    found = resume_checkpoint(out_dir)
    if found is None:
        raise UserError(f"--resume {str(out_dir)!r}: no checkpoint found (expected {checkpoint_root(out_dir)}/step_*)")
    return found.path


def policy_in(path: str | Path) -> Path:
    """The policy ``path`` names: ``path`` itself, or for a run directory (no model there, but
    ``checkpoints/``) its newest checkpoint, so that ``eval --model RUN`` evaluates where the run is. A damaged
    newest checkpoint is a one-line UserError naming the newest intact one."""
    p = Path(path).expanduser()
    if (p / "config.json").exists() or (p / "adapter_config.json").exists() or not _step_dirs(checkpoint_root(p)):
        return p
    newest = _step_dirs(checkpoint_root(p))[-1][1]
    found = resume_checkpoint(p)
    if found.path != newest:
        raise UserError(f"{newest} is damaged ({found.skipped[0][1]}); the newest intact checkpoint is {found.path} "
                        "(give it as the model)")
    return found.path


def checkpoint_step(path: Path) -> int:
    """The training step a checkpoint was saved at."""
    manifest = read_manifest(Path(path))
    if manifest is not None:
        return manifest.step
    return _loop_state(path)["step"]


def checkpoint_world_size(path: Path) -> int:
    """How many processes wrote a checkpoint (1 for checkpoints from before data parallelism)."""
    return _loop_state(path)["world_size"]


def _loop_state(path: Path) -> dict[str, int]:
    """Step and process count of a checkpoint's ``trainer_state.pt``; unreadable is a one-line UserError."""
    try:
        state = torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False)
        return {"step": int(state["step"]), "world_size": int(state.get("world_size", 1))}
    except (OSError, KeyError, RuntimeError, EOFError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UserError(f"checkpoint {str(path)!r} is unreadable ({type(exc).__name__}: {first})") from None


def load_trainer_state(trainer, path: Path) -> bool:
    """Optimizer and loop state of ``path``, whatever device wrote it: tensors are read onto the CPU and the
    optimizer moves its state onto each parameter's device, so a run saved on a GPU continues on a CPU (and
    the other way round). False when the checkpoint keeps no optimizer state (AdamW starts afresh)."""
    kept = has_optimizer_state(path)
    if kept:
        trainer.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False))
    trainer.load_state_dict(torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False))
    return kept
