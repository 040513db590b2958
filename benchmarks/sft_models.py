"""The committed π_SFT whose weights are not in git (no tracked file is over 1 MB), and how to rebuild them.

``benchmarks/results/webshop_sft_E4b/sft_model`` (the WebShop π_SFT of the RRO suite and of the credit audit's
WebShop menus) keeps its config and tokenizer in git; its ``model.safetensors`` (5.8 MB) is rebuilt by
``webshop_sft.py``'s run E4 and copied there. The records name the weights by sha256 (``WEBSHOP_SFT_SHA256``, the
file's; the RRO records' ``sft_sha256`` is ``learning.weights_sha256`` of the folder): a rebuild repeats them only
on a host like the one that made them (its floats differ elsewhere), and runs from other weights are told apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEBSHOP_SFT = "benchmarks/results/webshop_sft_E4b/sft_model"
WEBSHOP_SFT_SHA256 = "a721dfdc3cea043ffd22f803333015ee8f05e03ec94df27848dd527a5559c5e2"  # its model.safetensors
REBUILD = {
    WEBSHOP_SFT: "python -m benchmarks.webshop_sft --run E4 rollout.history_length=0 sft.demos=1024 sft.epochs=6 "
                 "sft.batch_size=16 && cp -r runs/webshop_sft/E4/sft_model benchmarks/results/webshop_sft_E4b/",
}


def has_weights(model: Path) -> bool:
    return any(model.glob("*.safetensors")) or any(model.glob("*.bin"))


def require_weights(model: str | Path, build: str | None = None) -> Path:
    """``model`` when it holds weights; else exit (status 2) with one line saying how to build them (``build``,
    or ``REBUILD``'s command for a committed π_SFT)."""
    path = Path(model)
    if has_weights(path):
        return path
    try:
        name = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        name = str(model)
    how = build or REBUILD.get(name)
    print(f"error: {model} has no weights" + (f" (not in git); rebuild them: {how}" if how else ""), file=sys.stderr)
    raise SystemExit(2)
