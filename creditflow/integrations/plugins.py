"""What creditflow's ``verl.plugins`` entry points run: a registration that does not depend on import order, and
that says so when it fails.

verl (0.9) imports each plugin's module from inside ``import verl``, and calls nothing. When that ``import verl``
is itself a line of one of creditflow's bridge modules (``import creditflow.integrations.verl`` before
``import verl``, as a notebook or a legacy-trainer script naturally does), the bridge is half-imported while the
plugin runs: its ``register`` does not exist yet. :func:`register_when_ready` therefore runs a plugin's
registration at once where every module it needs can be imported, and otherwise at the end of the import of the
last one that is half-imported (each bridge calls :func:`imported` on its last line). Either way, whichever of
creditflow's bridges and ``verl`` comes first, in every process that imports verl, the registration is done by
the time the import that started it returns.

verl's loader logs a plugin's exception at debug level, where no one sees it, and a registration that failed
showed only later, as verl's "Unknown advantage estimator". A registration that fails is logged here as a
warning (on stderr: ``import verl`` configures logging so), with what fails because of it; one whose optional
dependency is not installed (``transfer_queue`` for the v1 trainer's classes) is logged at info level.

This module imports neither verl nor a bridge: a plugin can import it whatever is half-imported.
"""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Sequence

log = logging.getLogger("creditflow.integrations")


@dataclass(frozen=True)
class Registration:
    """``action(*modules)`` once each module of ``needs`` is imported; ``what`` names it and ``otherwise`` says
    what fails without it (both for the warning); a missing module of ``optional`` is no failure."""

    what: str
    needs: tuple[str, ...]
    action: Callable[..., None]
    otherwise: str
    optional: tuple[str, ...] = ()


_ready: set[str] = set()  # modules whose import has finished (they called imported())
_pending: list[Registration] = []


def _half_imported(name: str) -> bool:
    """``name`` is being imported: in ``sys.modules`` with its body still running (the import system marks its
    spec ``_initializing`` meanwhile), and, for a bridge, before its last line called :func:`imported`."""
    if name in _ready:
        return False
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def register_when_ready(what: str, needs: Sequence[str], action: Callable[..., None], otherwise: str,
                        optional: Sequence[str] = ()) -> None:
    """Run ``action`` with the modules ``needs`` names, now, or when the last of them that is half-imported has
    finished importing (module docstring); a failure is one warning."""
    job = Registration(what, tuple(needs), action, otherwise, tuple(optional))
    if any(_half_imported(name) for name in job.needs):
        _pending.append(job)
    else:
        _run(job)


def imported(name: str) -> None:
    """The bridge module ``name`` has finished importing (its last line): run the registrations that waited for it."""
    _ready.add(name)
    for job in list(_pending):
        if job in _pending and not any(_half_imported(need) for need in job.needs):
            _pending.remove(job)
            _run(job)


def _run(job: Registration) -> None:
    try:
        modules: list[ModuleType] = [importlib.import_module(name) for name in job.needs]
        job.action(*modules)
    except ModuleNotFoundError as exc:
        if exc.name in job.optional:
            log.info("creditflow: %s skipped: %s is not installed; %s", job.what, exc.name, job.otherwise)
            return
        _failed(job, exc)
    except Exception as exc:
        _failed(job, exc)


_said: set[tuple[str, str]] = set()


def _failed(job: Registration, exc: Exception) -> None:
    text = (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__).strip().splitlines()[-1]
    if (job.what, text) in _said:  # both plugins register the estimators: one warning
        return
    _said.add((job.what, text))
    log.warning("creditflow: %s failed (%s); %s (docs/verl.md)", job.what, text, job.otherwise)


def pending() -> list[str]:
    """What still waits for a half-imported module (for tests and debugging)."""
    return [job.what for job in _pending]


__all__ = ["Registration", "imported", "pending", "register_when_ready"]
