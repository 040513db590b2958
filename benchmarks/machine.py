"""Machine facts recorded next to every benchmark result.

``matmul_gflops``: the rate of one large float32 matrix product (2048^3, torch's default threads, median
of 3) when the facts are taken. The reference machine's 2 cores have run it at 93 to 199 GFLOP/s on different
days (benchmarks/results/update_roofline.md), so timings from different days compare through it.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time


def matmul_gflops(n: int = 2048, repeats: int = 3) -> float | None:
    """GFLOP/s of one (n x n) @ (n x n) float32 product on the CPU, median of ``repeats`` after a warm-up
    (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return round(2 * n**3 / statistics.median(times) / 1e9, 1)


def machine_info() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
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
