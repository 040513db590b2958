"""The RL step's phases against the arithmetic: the measurements of ``step_cost.py --setting lean``.

Each phase is timed on both generation paths of the ``hf`` backend (``policy.decode=hf``, the transformers model
call; ``policy.decode=lean``, creditflow's lean decoder), interleaved repeat by repeat, in wall-clock and in
process CPU seconds (on a machine other jobs share, CPU seconds move less than wall seconds), and set against
its arithmetic: the FLOPs of the matrix products and attention the lean path runs, counted by
``torch.utils.flop_counter`` on its own operations, over the time, over the host's matrix-product rate
(``benchmarks.machine.matmul_gflops``, taken at the run's thread count).

* :func:`decode_cost`: ms per decode step at a batch of prompts (the sampling included: one draw per row),
  from the time of 17 tokens minus the time of 1 token with the same prefill, no row stopping;
* :func:`prefill_cost`: the batch's prompt tokens per second, through the backend's shared prefill (each
  distinct prompt and the prefix they all share computed once) and the first token;
* :func:`update_cost`: one ``policy_update`` on a step's rows, split into its phases (``pack``, ``forward``,
  ``loss``, ``backward``, ``step``).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from contextlib import contextmanager

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.hf import HFBackend
from creditflow.trainer.rl import policy_update

aten = torch.ops.aten


def _causal_share(q: int, k: int, is_causal: bool) -> float:
    """The share of the (q, k) score matrix a causal kernel computes (it skips the blocks above the diagonal)."""
    return (q + 1) / (2 * q) if is_causal and q == k else 1.0


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, dropout_p=0.0, is_causal=False, *args, **kwargs) -> int:
    """torch's CPU attention kernel (forward), which the flop counter does not know: two products per head, over
    the lower triangle only when it is causal."""
    b, h, q, d = query_shape
    return int(4 * b * h * q * key_shape[-2] * d * _causal_share(q, key_shape[-2], is_causal))


def _cpu_sdpa_backward_flops(grad_shape, query_shape, key_shape, value_shape, out, lse, dropout_p=0.0,
                             is_causal=False, *args, **kwargs) -> int:
    b, h, q, d = query_shape  # four products, as the counter counts the other kernels' backward
    return int(8 * b * h * q * key_shape[-2] * d * _causal_share(q, key_shape[-2], is_causal))


def matmul_rates(n: int = 2048, repeats: int = 5) -> dict:
    """GFLOP/s of one (n x n) @ (n x n) float32 product per wall second and per CPU second (medians; on a shared
    machine the two differ: the phases' CPU seconds compare with the second)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = [clock(lambda: a @ b) for _ in range(repeats)]
    return {"wall": round(2 * n**3 / median(t[0] for t in times) / 1e9, 1),
            "cpu": round(2 * n**3 / median(t[1] for t in times) / 1e9, 1)}


def copy_bandwidth(mib: int = 512) -> float:
    """GB/s of reading and writing a ``mib`` MiB float32 tensor (one copy, best of 3): the memory-traffic ceiling."""
    src = torch.ones(mib * 2**18)
    dst = torch.empty_like(src)
    best = min(clock(lambda: dst.copy_(src))[0] for _ in range(3))
    return 2 * src.numel() * 4 / best / 1e9


CPU_SDPA = {aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
            aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops}


def flops(fn, split: bool = False):
    """FLOPs of the matrix products and attention ``fn`` runs (``split``: also {operation: FLOPs})."""
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        fn()
    if not split:
        return counter.get_total_flops()
    return counter.get_total_flops(), {str(op).removeprefix("aten."): n
                                       for op, n in counter.get_flop_counts().get("Global", {}).items()}


def clock(fn) -> tuple[float, float]:
    """Wall seconds and process CPU seconds of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


class _NoStop:
    """The tokenizer with no stop token: every row generates the whole budget (decode steps at a fixed batch)."""

    def __init__(self, tok):
        self.tok, self.pad_token_id, self.eos_token_id = tok, tok.pad_token_id, -1

    def decode(self, *args, **kwargs):
        return self.tok.decode(*args, **kwargs)


def backends(model, tok, autocast: str = "none", bf16_copy: bool = False) -> dict[str, HFBackend]:
    """The two paths of the ``hf`` backend's sampling loop, both with ``share_prefix``, no stop token; with
    ``bf16_copy`` also both on a bfloat16 rollout copy (``policy.rollout_dtype=bf16``), as ``hf+bf16`` and
    ``lean+bf16``."""
    out = {decode: HFBackend(model, _NoStop(tok), autocast=autocast, share_prefix=True, decode=decode)
           for decode in ("hf", "lean")}
    if bf16_copy:
        out.update({f"{decode}+bf16": HFBackend(model, _NoStop(tok), share_prefix=True, decode=decode,
                                                rollout_dtype="bf16") for decode in ("hf", "lean")})
    return out


def median(values) -> float:
    return float(statistics.median(values))


def decode_cost(model, tok, prompts: list[list[int]], repeats: int = 3, steps: int = 16,
                autocast: str = "none", bf16_copy: bool = False) -> dict:
    """ms per decode step for the batch ``prompts`` on each path of :func:`backends` (wall and CPU, medians over
    ``repeats`` interleaved), the lean path's GFLOP per step, the ratios hf / lean and, per path, hf / path."""
    paths = backends(model, tok, autocast, bf16_copy)
    found = {name: b._prefill_distinct(prompts) for name, b in paths.items()}

    def run(name: str, k: int):
        torch.manual_seed(0)
        paths[name]._generate_cached(prompts, found[name], SamplingParams(max_new_tokens=k, temperature=1.0),
                                     keep=False)

    per = {name: {"wall": [], "cpu": []} for name in paths}
    for _ in range(repeats):
        for name in paths:
            one, many = clock(lambda: run(name, 1)), clock(lambda: run(name, steps + 1))
            per[name]["wall"].append(1000 * (many[0] - one[0]) / steps)
            per[name]["cpu"].append(1000 * (many[1] - one[1]) / steps)
    gflop = (flops(lambda: run("lean", steps + 1)) - flops(lambda: run("lean", 1))) / steps / 1e9
    out = {"batch": len(prompts), "context_tokens_mean": float(np.mean([len(p) for p in prompts])),
           "distinct_prompts": len({tuple(p) for p in prompts}), "gflop_per_step": gflop}
    for name in paths:
        out[name] = {"ms_wall": median(per[name]["wall"]), "ms_cpu": median(per[name]["cpu"]),
                     "all_ms_wall": per[name]["wall"], "all_ms_cpu": per[name]["cpu"]}
    out["ratio_wall"] = out["hf"]["ms_wall"] / out["lean"]["ms_wall"]
    out["ratio_cpu"] = out["hf"]["ms_cpu"] / out["lean"]["ms_cpu"]
    out["over_hf"] = {name: {"wall": out["hf"]["ms_wall"] / out[name]["ms_wall"],
                             "cpu": out["hf"]["ms_cpu"] / out[name]["ms_cpu"]} for name in paths}
    return out


def prefill_cost(model, tok, prompts: list[list[int]], repeats: int = 3, autocast: str = "none") -> dict:
    """The batch's prompt tokens per second on each path: the shared prefill and the first token (wall and CPU
    medians over ``repeats`` interleaved), the lean path's GFLOP, and the ratios lean / hf."""
    paths = backends(model, tok, autocast)

    def run(name: str):
        backend = paths[name]
        backend._generate_cached(prompts, backend._prefill_distinct(prompts),
                                 SamplingParams(max_new_tokens=1, temperature=0.0), keep=False)

    per = {name: {"wall": [], "cpu": []} for name in paths}
    for _ in range(repeats):
        for name in paths:
            wall, cpu = clock(lambda: run(name))
            per[name]["wall"].append(wall)
            per[name]["cpu"].append(cpu)
    tokens = sum(len(p) for p in prompts)
    out = {"batch": len(prompts), "prompt_tokens": tokens, "distinct_prompts": len({tuple(p) for p in prompts}),
           "gflop": flops(lambda: run("lean")) / 1e9}
    for name in paths:
        wall, cpu = median(per[name]["wall"]), median(per[name]["cpu"])
        out[name] = {"s_wall": wall, "s_cpu": cpu, "tokens_per_s_wall": tokens / wall, "tokens_per_s_cpu": tokens / cpu}
    out["ratio_wall"] = out["hf"]["s_wall"] / out["lean"]["s_wall"]
    out["ratio_cpu"] = out["hf"]["s_cpu"] / out["lean"]["s_cpu"]
    return out


class PhaseClock:
    """Accumulated wall and CPU seconds per phase (``policy_update``'s ``clock``)."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall[phase] = self.wall.get(phase, 0.0) + time.perf_counter() - wall
        self.cpu[phase] = self.cpu.get(phase, 0.0) + time.process_time() - cpu


def update_cost(model, rows, rl, fwd, repeats: int = 2) -> dict:
    """One ``policy_update`` on ``rows`` (from a copy of ``model`` with a fresh AdamW each time), by phase:
    wall and CPU seconds (medians over ``repeats``), the update's GFLOP (forward and backward), row tokens."""
    runs = []

    def fresh():
        work = copy.deepcopy(model)
        return work, torch.optim.AdamW([p for p in work.parameters() if p.requires_grad], lr=rl.lr,
                                       weight_decay=rl.weight_decay)

    def once(work, opt, timer=None):
        policy_update(work, opt, rows, rl, dataclasses.replace(fwd, clock=timer), np.random.default_rng(0))

    for _ in range(repeats):
        work, opt = fresh()
        timer = PhaseClock()
        wall, cpu = clock(lambda: once(work, opt, timer))
        runs.append({"s_wall": wall, "s_cpu": cpu, "phases_wall": timer.wall, "phases_cpu": timer.cpu})
    phases = list(runs[0]["phases_wall"])
    trained = [r for r in rows if any(s.advantage != 0 for s in r.samples)] if rl.kl_coef == 0 and \
        rl.entropy_coef == 0 else rows
    total, split = flops(lambda: once(*fresh()), split=True)
    return {"rows": len(trained), "row_tokens": sum(len(r) for r in trained), "gflop": total / 1e9,
            "gflop_by_op": {op: n / 1e9 for op, n in split.items()},
            "s_wall": median(r["s_wall"] for r in runs), "s_cpu": median(r["s_cpu"] for r in runs),
            "phases_wall": {p: median(r["phases_wall"][p] for r in runs) for p in phases},
            "phases_cpu": {p: median(r["phases_cpu"][p] for r in runs) for p in phases}}
