"""Pack the unfinished learning runs of a work directory for the trip back from a lent GPU machine.

    python -m benchmarks.gpu_pack WORK OUT [--limit 6] [--also WORK2 ...]

Each run directory ``WORK/<arm>_s<seed>`` that has a checkpoint but has not reached its ``rl.steps`` becomes
``OUT/run_<arm>_s<seed>.tgz`` holding its ``config.yaml``, ``metrics.jsonl`` and newest checkpoint (paths as
they are under the repository root, so ``tar -xzf`` there puts them back); ``benchmarks/credit_learning.py``
then continues the run from that checkpoint exactly as ``creditflow train --resume`` does. The most advanced
runs go first; at most ``--limit`` of them, since a device call returns at most 8 files of 64 MiB in all and a
checkpoint of the tiny policy is ~10 MB (benchmarks/gpu_batch.sh).
"""

from __future__ import annotations

import argparse
import tarfile
from pathlib import Path

import yaml


from creditflow.trainer.checkpoint import checkpoint_step, latest_checkpoint


def unfinished(work: Path) -> list[tuple[int, Path, Path]]:
    """``(checkpoint step, run directory, checkpoint)`` of each run under ``work`` that can be continued."""
    runs = []
    for run in sorted(p for p in work.glob("*_s*") if p.is_dir()):
        try:
            ckpt = latest_checkpoint(run)
            step = checkpoint_step(ckpt)
            steps = yaml.safe_load((run / "config.yaml").read_text())["rl"]["steps"]
        except Exception:  # no checkpoint or no config yet: nothing to continue from
            continue
        if step < steps:
            runs.append((step, run, ckpt))
    return sorted(runs, key=lambda r: (-r[0], r[1].name))


def pack(work: Path | list[Path], out: Path, limit: int) -> list[Path]:
    """Pack the most advanced unfinished runs of one work directory, or of several (one limit for all)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    works = [work] if isinstance(work, Path) else list(work)
    runs = sorted((r for w in works for r in unfinished(w)), key=lambda r: (-r[0], str(r[1])))
    for step, run, ckpt in runs[:limit]:
        target = out / (f"run_{run.name}.tgz" if len(works) == 1 else f"run_{run.parent.name}_{run.name}.tgz")
        with tarfile.open(target, "w:gz") as tar:
            for path in (run / "config.yaml", run / "metrics.jsonl", ckpt, run / "checkpoints" / "latest"):
                if path.exists():
                    tar.add(path)
        written.append(target)
        print(f"unfinished {run.name}: step {step} -> {target.name} ({target.stat().st_size / 2**20:.1f} MiB)")
    for step, run, _ in runs[limit:]:
        print(f"unfinished {run.name}: step {step}, not brought back (at most {limit} run files)")
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--also", type=Path, nargs="*", default=[], help="more work directories, under the same limit")
    args = ap.parse_args()
    pack([args.work, *args.also] if args.also else args.work, args.out, args.limit)


if __name__ == "__main__":
    main()
