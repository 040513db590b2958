"""Formatting every page shares: numbers, intervals, arm names, machines, Markdown tables."""

from __future__ import annotations

import re

from benchmarks import stats
from benchmarks.report.claims import NAMES


def f3(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}".replace("-", "−")


def f2(x) -> str:
    return f3(x, 2)


def signed(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:+.{digits}f}".replace("-", "−")


def pct(x) -> str:
    """A share as a whole percentage: 0.853 -> 85%."""
    return "–" if x is None else f"{100 * x:.0f}%"


def span(values, fmt: str = "f3") -> str:
    """``lo-hi`` of ``values`` in the format of the filter named ``fmt`` (one value when they are all equal)."""
    form = {"f3": f3, "f2": f2, "pct": lambda v: f"{100 * v:.0f}", "signed": signed}[fmt]
    lo, hi = form(min(values)), form(max(values))
    joint = " to " if fmt == "signed" or lo.startswith("−") else "-"
    return (lo if lo == hi else f"{lo}{joint}{hi}") + ("%" if fmt == "pct" else "")


def separation(p: stats.Paired) -> str:
    """Whether a paired difference is separated from zero, with both intervals."""
    s = p.summary
    both = f"bootstrap {interval(s.boot, sign=True)}, t {interval(s.t, sign=True)}"
    if p.separated:
        return f"separated from zero ({both})"
    if p.n >= 2 and stats.excludes_zero(s.boot):
        return f"not separated from zero: the bootstrap interval excludes it, the t-interval holds it ({both})"
    return f"not separated from zero ({both})"


def reflow(lines: list[str]) -> list[str]:
    """Rendered narrative as Markdown paragraphs and list items, one line each (Jinja leaves lines broken where
    its tags were)."""
    out, block = [], []

    def flush():
        if block and block[0].lstrip().startswith(("|", "#", ">", "```", "![")):
            out.extend(block)
        elif block:
            items: list[str] = []
            for line in block:
                text = line.strip()
                if not items or re.match(r"^(- |\* |\d+\. )", text):
                    items.append(text)
                else:
                    items[-1] += " " + text
            out.extend(re.sub(r"(?<=\S)  +", " ", item) for item in items)
        block.clear()

    for line in lines:
        if line.strip():
            block.append(line)
        else:
            flush()
            out.append("")
    flush()
    return out


def interval(ci, digits: int = 3, sign: bool = False) -> str:
    if not ci:
        return "–"
    fmt = signed if sign else f3
    return f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def name(arm: str) -> str:
    return NAMES.get(arm, arm)


def seeds_text(seeds) -> str:
    return ", ".join(str(s) for s in seeds)


def machine_text(m: dict | None) -> str:
    if not m:
        return "not recorded"
    parts = [f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores)"]
    if m.get("gpu"):
        parts.append(str(m["gpu"]))
    if m.get("cpu_family_model"):
        parts.append(f"CPU family/model {m['cpu_family_model']}")
    if m.get("matmul_gflops"):
        parts.append(f"one large float32 matrix product at {m['matmul_gflops']:.0f} GFLOP/s")
    for key in ("torch", "numpy"):
        if m.get(key):
            parts.append(f"{key} {m[key]}")
    if m.get("date"):
        parts.append(str(m["date"]))
    return ", ".join(parts)


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align or ["---"] * len(header)) + "|"]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def arm_cell(s: stats.Summary) -> str:
    """mean [bootstrap] and, with n <= 5, the t-interval beside it."""
    if s.mean is None:
        return "–"
    if s.n < 2:
        return f"{f3(s.mean)} (one seed)"
    return f"{f3(s.mean)} {interval(s.boot)}" + (f", t {interval(s.t)}" if s.n <= stats.SMALL_N else "")


def diff_label(a: str, b: str) -> str:
    """``a − b`` in arm names, parenthesised where a name holds a '+' or a comma."""
    def part(arm):
        text = name(arm)
        return f"({text})" if " + " in text or ", " in text else text
    return f"{part(a)} − {part(b)}"


def pair_word(p: stats.Paired) -> str:
    if p.n < 2:
        return "not tested"
    if p.separated > 0:
        return "yes"
    if p.separated < 0:
        return "reversed"
    return "in means only" if p.summary.mean > 0 else "no"


def ordered(arms) -> list[str]:
    known = list(NAMES)
    return sorted(arms, key=lambda a: (known.index(a) if a in known else len(known), a))


def summary_cell(values: dict) -> str:
    return arm_cell(stats.summarize([values[k] for k in sorted(values)]))


def diff_cell(p: stats.Paired) -> str:
    return f"{signed(p.summary.mean)} {interval(p.summary.boot, sign=True)}" if p.n >= 2 else "–"
