"""Data parallelism across processes (``accelerate launch`` or ``torchrun``): who this process is, and the
few collectives the RL trainer needs.

A launcher starts N processes with ``WORLD_SIZE=N`` and ``RANK`` / ``LOCAL_RANK`` in their environment.
:func:`start` joins them through accelerate's ``PartialState`` (gloo on CPU, NCCL on GPUs, one GPU per
process), which TRL's trainers then share. Every process then holds a full copy of the policy:

* each rolls out its contiguous share of the step's tasks (:func:`shard`), so a task's whole group and its
  credit stay on one process;
* what the curriculum and the metrics need from the rollouts (trajectories without their token ids) is
  gathered to every process (:func:`gather_trajectories`), so curriculum state and rollout metrics are the
  same everywhere;
* the loss normalisers are the totals over all processes and the gradients are summed across them
  (:func:`all_reduce_grads`) before clipping, so every process takes the same optimizer step, the one a
  single process would take on the union of the rows (docs/scaling.md says exactly when);
* what each process measured on its own share becomes the run's metric by the rule declared with it
  (:class:`Local`: mean over trajectories or tokens, count, slowest time, statistic of pooled samples), in
  one helper (:func:`reduce_metrics`).

Every function takes the :class:`World` it works in; with one process (``World()``) they return at once and
touch nothing, which keeps the single-process run bit-for-bit what it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from accelerate import PartialState

from creditflow.errors import UserError
from creditflow.rollout.engine import RolloutResult
from creditflow.rollout.trajectory import Trajectory
from creditflow.world import World, launched_size, sharded_launch

T = TypeVar("T")

BUCKET_BYTES = 64 << 20
"""Gradients are all-reduced in flat buckets of at most this size (one transient copy of a bucket)."""


def start(cpu: bool) -> World:
    """Join the launched processes (a no-op without a launcher). ``cpu``: the policy trains on CPU, so the
    processes talk over gloo; otherwise accelerate picks the GPU backend and gives each process its GPU
    (``LOCAL_RANK``), which ``policy.device=auto``/``cuda`` then means. An FSDP / DeepSpeed launch on CPU
    is a one-line UserError (accelerate would run it as plain data parallelism)."""
    if launched_size() == 1:
        return World()
    sharded = sharded_launch()
    if cpu and sharded:  # accelerate shards GPU processes only: on CPU it would quietly replicate instead
        raise UserError(f"the {sharded} launch config shards the policy over GPUs, and this one trains on CPU; "
                        "use configs/accelerate/ddp.yaml there")
    state = PartialState(cpu=cpu)
    if not dist.is_initialized() or state.num_processes != launched_size():  # no silent N copies
        raise UserError(f"WORLD_SIZE={launched_size()} but accelerate joined {state.num_processes} process(es); "
                        "launch with accelerate launch --config_file configs/accelerate/ddp.yaml or torchrun")
    return World(state.process_index, state.num_processes)


def barrier(world: World) -> None:
    """Wait until every process got here (rank 0 finished writing what the others read next)."""
    if world.distributed:
        dist.barrier()


def shard(items: Sequence[T], world: World) -> list[T]:
    """This process's contiguous share of ``items`` (the first ``len % size`` ranks get one more), so the
    shares concatenated in rank order are ``items`` again."""
    if not world.distributed:
        return list(items)
    base, extra = divmod(len(items), world.size)
    start = world.rank * base + min(world.rank, extra)
    return list(items[start: start + base + (world.rank < extra)])


def gather(obj: Any, world: World) -> list[Any]:
    """Every process's ``obj`` (picklable), in rank order, on every process."""
    if not world.distributed:
        return [obj]
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj: T, world: World) -> T:
    """Rank 0's ``obj`` on every process."""
    if not world.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _device(world: World) -> torch.device:
    """Where collective tensors live: the process's GPU under NCCL, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_sum(values: list, world: World) -> list:
    """Element-wise sums over the processes of ``values`` (numbers, float64); ``values`` itself in one
    process."""
    if not world.distributed:
        return values
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device(world))
    dist.all_reduce(t)
    return t.tolist()


def all_max(value: int, world: World) -> int:
    """The largest ``value`` over the processes."""
    if not world.distributed:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=_device(world))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _buckets(tensors: list[torch.Tensor], limit: int) -> Iterable[list[torch.Tensor]]:
    """Consecutive runs of same-dtype, same-device tensors of at most ``limit`` bytes (one tensor minimum)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if bucket and (size + nbytes > limit or t.dtype != bucket[0].dtype or t.device != bucket[0].device):
            yield bucket
            bucket, size = [], 0
        bucket.append(t)
        size += nbytes
    if bucket:
        yield bucket


def all_reduce_grads(params: Iterable[torch.nn.Parameter], world: World, bucket_bytes: int = BUCKET_BYTES) -> None:
    """Sum the gradients of ``params`` over the processes, in place (a parameter without a gradient on
    this process counts as zeros). The loss is normalised by global totals, so the sum is the gradient of
    the union batch: what DDP computes, with the reduction at the one point where every process has
    finished its micro-batches, whatever their number."""
    if not world.distributed:
        return
    grads = []
    for p in params:
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    for bucket in _buckets(grads, bucket_bytes):
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat)
        for g, part in zip(bucket, flat.split([g.numel() for g in bucket])):
            g.copy_(part.view_as(g))


def broadcast_parameters(model: torch.nn.Module, world: World) -> None:
    """Rank 0's parameters and buffers on every process (as DDP does when it wraps a model), so the copies
    start equal even if loading was not deterministic."""
    if not world.distributed:
        return
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)


def without_tokens(traj: Trajectory) -> Trajectory:
    """A copy of ``traj`` without what only training reads (token ids, log-probs) or what stays local (env
    snapshots): what the curriculum and the rollout metrics need, small enough to send every step."""
    steps = [dataclasses.replace(s, prompt_ids=None, response_ids=None, logprobs=None) for s in traj.steps]
    start = dataclasses.replace(traj.start, snapshot=None) if traj.start is not None else None
    return dataclasses.replace(traj, steps=steps, meta=dict(traj.meta), start=start, end_snapshot=None)


def gather_trajectories(trajs: list[Trajectory], world: World) -> list[Trajectory]:
    """All processes' trajectories (without tokens, :func:`without_tokens`) in rank order, on every process;
    in one process ``trajs`` itself (nothing is copied)."""
    if not world.distributed:
        return trajs
    return [t for part in gather([without_tokens(t) for t in trajs], world) for t in part]


def gather_rollout(result: RolloutResult, world: World) -> RolloutResult:
    """Every process's rollout in rank order, on every process: trajectories without tokens
    (:func:`gather_trajectories`) and the unrestored groups; in one process ``result`` itself."""
    if not world.distributed:
        return result
    parts = gather(([without_tokens(t) for t in result.trajectories], result.unrestored), world)  # one collective
    return RolloutResult([t for trajs, _ in parts for t in trajs], [g for _, groups in parts for g in groups])


MEAN, SUM, MAX = "mean", "sum", "max"
POOLED_MEAN, POOLED_STD = "pooled_mean", "pooled_std"
POOLED = {POOLED_MEAN: lambda values: float(np.mean(values)) if len(values) else 0.0,
          POOLED_STD: lambda values: float(np.std(values)) if len(values) else 0.0}
"""The rules of :class:`Local` whose value is a list of samples: the statistic of every process's samples."""


@dataclasses.dataclass(frozen=True)
class Local:
    """A metric as this process measured it on its own share, with the rule that makes the run's value of the
    processes' values:

    * ``MEAN``: a rate or mean over ``weight`` items (trajectories, tokens): the ``weight``-weighted mean over
      the processes that have the metric (their plain mean when every weight is 0);
    * ``SUM``: a count, added up;
    * ``MAX``: a wall time: the slowest process sets the pace;
    * ``POOLED_MEAN``, ``POOLED_STD``: ``value`` is this process's list of samples (advantages, lengths), the
      metric is the statistic of all processes' samples together (exact; 0.0 when there are none).

    In one process every metric is its own value (pooled: the statistic of its samples), bit for bit.
    """

    value: Any
    rule: str = MEAN
    weight: float = 1.0


def reduce_metrics(local: dict[str, Local], world: World) -> dict:
    """The run's metrics from every process's ``local`` ones, each by its own rule (:class:`Local`); a
    collective (every process calls it, with keys that may differ), one gather."""
    return combine(gather(local, world))


def combine(parts: list[dict[str, Local]]) -> dict:
    """The metrics of :func:`reduce_metrics` from the processes' ``parts`` in rank order, keys in order of first
    appearance. One part: its values as they are (pooled: their statistic)."""
    if len(parts) == 1:
        return {key: POOLED[m.rule](m.value) if m.rule in POOLED else m.value for key, m in parts[0].items()}
    out: dict = {}
    for key in dict.fromkeys(k for part in parts for k in part):
        have = [part[key] for part in parts if key in part]
        rule = have[0].rule
        if rule in POOLED:
            out[key] = POOLED[rule]([x for m in have for x in m.value])
            continue
        have = [m for m in have if isinstance(m.value, (int, float))]
        if not have:
            continue
        if rule == SUM:
            out[key] = sum(m.value for m in have)
        elif rule == MAX:
            out[key] = max(m.value for m in have)
        elif rule == MEAN:
            total = sum(m.weight for m in have)
            out[key] = (sum(m.value * m.weight for m in have) / total if total > 0
                        else float(np.mean([m.value for m in have])))
        else:
            raise ValueError(f"metric {key}: unknown reduction rule {rule!r}")
    return out
