"""Checkpoints: model (save_pretrained), optimizer, RNG states, loop state and hook buffers.

Layout: ``<run>/checkpoints/step_000010/`` with the HF model + tokenizer, ``optimizer.pt`` and
``trainer_state.pt``; ``<run>/checkpoints/latest`` names the newest. Written to a temporary directory
and renamed, so a crash never leaves a half-written checkpoint behind. Under N processes rank 0 writes it
(the policy and optimizer are the same everywhere; ``trainer_state.pt`` holds every process's RNG states)
while the others wait, and every process loads it on ``--resume``.

A LoRA policy (``policy.lora``) saves as PEFT does: ``adapter_model.safetensors`` and
``adapter_config.json``, whose ``base_model_name_or_path`` is the absolute path of the base model (π_SFT),
never changed by training; ``optimizer.pt`` then holds the adapter's parameters' state only. ``--resume``
puts the adapter back on the base; ``creditflow eval`` and ``creditflow export`` load it merged.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from creditflow.errors import UserError
from creditflow.train.distributed import barrier


def checkpoint_root(out_dir: str | Path) -> Path:
    return Path(out_dir) / "checkpoints"


def save_checkpoint(trainer, keep: int = 2) -> Path:
    """Write the trainer's checkpoint; every process calls it (``trainer.world``), rank 0 writes."""
    world = trainer.world
    state = trainer.state_dict()  # under N processes a collective: it gathers every process's RNG states
    root = checkpoint_root(trainer.out_dir)
    name = f"step_{trainer.step:06d}"
    final = root / name
    if not world.main:
        barrier(world)  # until rank 0 has written it
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    trainer.model.save_pretrained(tmp)
    trainer.tok.save_pretrained(tmp)
    torch.save(trainer.optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(state, tmp / "trainer_state.pt")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    latest_tmp = root / ".latest.tmp"
    latest_tmp.write_text(name)
    latest_tmp.replace(root / "latest")
    for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old)
    barrier(world)
    return final


def latest_checkpoint(out_dir: str | Path) -> Path:
    root = checkpoint_root(out_dir)
    marker = root / "latest"
    if not marker.exists():
        raise UserError(f"--resume {str(out_dir)!r}: no checkpoint found (expected {marker})")
    path = root / marker.read_text().strip()
    if not path.is_dir():
        raise UserError(f"--resume {str(out_dir)!r}: checkpoint {path} is missing")
    return path


def policy_in(path: str | Path) -> Path:
    """The policy ``path`` names: ``path`` itself, or for a run directory (no model there, but a
    ``checkpoints/latest``) its newest checkpoint, so that ``eval --model RUN`` evaluates where the run is."""
    p = Path(path).expanduser()
    marker = checkpoint_root(p) / "latest"
    if marker.is_file() and not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
        return checkpoint_root(p) / marker.read_text().strip()
    return p


def checkpoint_step(path: Path) -> int:
    """The training step a checkpoint was saved at."""
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


def load_trainer_state(trainer, path: Path) -> None:
    """Optimizer and loop state of ``path``, whatever device wrote it: tensors are read onto the CPU and the
    optimizer moves its state onto each parameter's device, so a run saved on a GPU continues on a CPU (and
    the other way round)."""
    trainer.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False))
    trainer.load_state_dict(torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=False))
