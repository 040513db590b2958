"""Machine facts recorded next to every benchmark result."""

from __future__ import annotations

import datetime
import os
import platform


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
    return info
