"""Machine facts recorded next to every benchmark result.

``matmul_gflops``: the rate of one large float32 matrix product (2048^3, torch's default threads, median
of 3) when the facts are taken. The reference machine's 2 cores have run it at 93 to 211 GFLOP/s on different
days (benchmarks/results/update_roofline.md), so timings from different days compare through it.
``cpu_family_model`` and ``isa`` say which CPU generation that was: the machine is not always the same
one (2026-12-01: family 25 model 1, AVX2 only, 105-127 GFLOP/s, against AVX-512 BF16 hosts before).
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time


def matmul_gflops(n: int = 2048, repeats: int = 3, dtype: str = "float32") -> float | None:
    """GFLOP/s of one (n x n) @ (n x n) product in ``dtype`` (``float32`` or ``bfloat16``) on the CPU, median
    of ``repeats`` after a warm-up (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    a, b = torch.randn(n, n, dtype=getattr(torch, dtype)), torch.randn(n, n, dtype=getattr(torch, dtype))
    a @ b
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return round(2 * n**3 / statistics.median(times) / 1e9, 1)


# vector extensions that set this CPU's matrix-product rates (float32 and bf16): "AMD EPYC" alone has named both
# an AVX2-only host (family 25 model 1) and an AVX-512 BF16 one, about 2x apart in float32 and far more in bf16
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_generation(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The CPU's family / model numbers and which of :data:`ISA_FLAGS` it has (empty where unreadable)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("cpu family", "model", "flags") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:  # the first processor's block is enough
                    break
    except OSError:
        return {}
    out: dict = {}
    if "cpu family" in fields and "model" in fields:
        out["cpu_family_model"] = f"{fields['cpu family']}/{fields['model']}"
    if "flags" in fields:
        flags = set(fields["flags"].split())
        out["isa"] = [f for f in ISA_FLAGS if f in flags]
    return out


def cpu_label(machine: dict) -> str:
    """``machine_info()['cpu']`` with its generation where recorded: ``AMD EPYC [25/1, avx2]``."""
    extra = [x for x in (machine.get("cpu_family_model"), " ".join(machine.get("isa") or [])) if x]
    return machine.get("cpu", "unknown") + (f" [{', '.join(extra)}]" if extra else "")


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, **cpu_generation(), "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "date": datetime.date.today().isoformat()}
    try:
        import numpy
        import torch

        info.update(torch=torch.__version__, numpy=numpy.__version__,
                    gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except ImportError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        info["memory_gib"] = round(mem / 2**30, 1)
    except (ValueError, OSError):
        pass
    info["matmul_gflops"] = matmul_gflops()
    return info
