"""Which process this is among the ones a launcher started (``accelerate launch``, ``torchrun``), read without
torch: the launcher's environment (``WORLD_SIZE``, ``RANK``) before the processes join, torch.distributed's
process group after (it can only exist once torch is imported, so it is looked up, never imported, here).

The CLI reads these before any command imports torch (``creditflow --help`` loads none);
:mod:`creditflow.trainer.distributed` joins the processes and holds the collectives.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from creditflow.errors import UserError


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place among the launched ones: ``rank`` of ``size``; rank 0 writes the run directory."""

    rank: int = 0
    size: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def launched_size() -> int:
    """How many processes the launcher started (``WORLD_SIZE``; 1 without a launcher), read before joining."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def sharded_launch() -> str | None:
    """The launcher's sharding mode (``accelerate launch`` with an FSDP or DeepSpeed config), or None."""
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return "FSDP"
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return "DeepSpeed"
    return None


def refuse_copies(command: str) -> None:
    """A one-line UserError when ``command``, which runs in one process, was launched as several: they would
    each do the whole job into the same place."""
    n = launched_size()
    if n > 1:
        raise UserError(f"creditflow {command} runs in one process, but {n} were launched (WORLD_SIZE={n}) and "
                        f"each would redo it into the same place; run it without accelerate launch / torchrun "
                        f"(data-parallel commands: train, sft, rro train)")


def _process_group():
    """``torch.distributed`` when torch is loaded and a process group was started; else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def reports_errors() -> bool:
    """Whether this process prints a user error. Before the launched processes join, every one of them
    runs the same checks and fails alike, so rank 0 alone says it; after, an error may be one process's own,
    so each says it."""
    if _process_group() is not None:
        return True
    return os.environ.get("RANK", "0") == "0"


def current() -> World:
    """The world of this process as torch.distributed sees it (one process when no group was started)."""
    dist = _process_group()
    if dist is not None:
        return World(dist.get_rank(), dist.get_world_size())
    return World()


def shutdown() -> None:
    """Leave the process group (at the end of a command), so no backend complains at exit."""
    dist = _process_group()
    if dist is not None:
        dist.destroy_process_group()
