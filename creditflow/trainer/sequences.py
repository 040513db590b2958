"""Training rows: what the RL update trains on, laid out as token sequences and batched.

A :class:`Sample` is one policy decision (prompt, sampled response, behaviour log-probs, advantage). A
:class:`Row` is one training sequence holding one or more decisions: in the ``window`` layout one row per
decision, in the ``conversation`` layout one row per trajectory (``rollout.history``; docs/formats.md,
"Multi-turn layouts"). :func:`pack_microbatches` groups rows under a token budget and :func:`collate` turns
a micro-batch into right-padded tensors whose masks cover exactly the sampled tokens: a step's advantage
lands on its own response tokens and nowhere else (tests/trainer/test_sequences.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from creditflow.rollout.trajectory import Trajectory


@dataclass
class Sample:
    """One policy decision: a prompt, the sampled response, its behaviour log-probs and advantage."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    ref_logprobs: list[float] | None = None
    traj_weight: float = 1.0  # 1 / (decisions in its trajectory), used by loss_agg="traj-mean"
    is_weights: list[float] | None = None  # per-token TIS weights (rl.tis_cap), folded into the advantage

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass
class Row:
    """One training sequence: token ids and the decisions whose sampled tokens it holds.

    ``window`` layout: one decision, ``ids`` = its prompt + response. ``conversation`` layout: a whole
    trajectory, ``ids`` = its last prompt + response, of which every decision's prompt is a prefix; the
    response of decision ``s`` sits at ``ids[len(s.prompt_ids): len(s.prompt_ids) + len(s.response_ids)]``.
    """

    ids: list[int]
    samples: list[Sample]

    def __len__(self) -> int:
        return len(self.ids)


def decisions(rows: list[Row]) -> list[Sample]:
    """Every decision of ``rows``, row by row: the order of every per-decision list the update returns."""
    return [s for row in rows for s in row.samples]


def samples_from(trajectories: list[Trajectory]) -> list[Sample]:
    """The decisions (steps with a response) of ``trajectories``, each with its step's advantage."""
    out = []
    for traj in trajectories:
        steps = [step for step in traj.steps if step.response_ids]
        for step in steps:
            if step.advantage is None:
                raise ValueError(f"step of {traj.traj_id} has no advantage (credit not computed)")
            out.append(Sample(step.prompt_ids, step.response_ids, step.logprobs, float(step.advantage),
                              traj_weight=1.0 / len(steps)))
    return out


def rows_from(trajectories: list[Trajectory], history: str = "window") -> list[Row]:
    """The training rows of ``trajectories`` in the ``history`` layout (see :class:`Row`)."""
    if history == "window":
        return window_rows(samples_from(trajectories))
    if history != "conversation":
        raise ValueError(f"unknown history layout {history!r}; use window or conversation")
    rows = []
    for traj in trajectories:
        samples = samples_from([traj])
        if samples:
            rows.append(conversation_row(samples, traj.traj_id))
    return rows


def window_rows(samples: list[Sample]) -> list[Row]:
    """One row per decision: its prompt + response."""
    return [Row(s.prompt_ids + s.response_ids, [s]) for s in samples]


def conversation_row(samples: list[Sample], name: str = "") -> Row:
    """One row for a trajectory's decisions: its last prompt + response, checked to hold every decision's
    prompt as a prefix followed by its sampled ids (the conversation layout trains on exactly the ids
    the policy sampled)."""
    last = samples[-1]
    ids = last.prompt_ids + last.response_ids
    for s in samples:
        n = len(s.prompt_ids)
        if ids[:n] != s.prompt_ids or ids[n: n + len(s.response_ids)] != s.response_ids:
            raise ValueError(f"conversation layout: a prompt + response of {name or 'a trajectory'} is not a "
                             "prefix of its last one (were the steps made in the conversation layout?)")
    return Row(ids, samples)


def pack_microbatches(rows: list, token_budget: int, pad: bool = True) -> list[list]:
    """Greedy packing of length-sorted rows so rows x max_len <= token_budget (one row minimum).

    ``pad=False``: only rows of equal length share a micro-batch, so nothing is padded and attention takes
    its causal fast path (no mask); the conversation layout's long rows run 1.6-2x faster that way
    (benchmarks/results/step_cost.md), while short window rows gain nothing from it.
    """
    order = sorted(rows, key=len)
    batches, cur, cur_max = [], [], 0
    for s in order:
        new_max = max(cur_max, len(s))
        if cur and (new_max * (len(cur) + 1) > token_budget or (not pad and len(s) != cur_max)):
            batches.append(cur)
            cur, cur_max = [], 0
            new_max = len(s)
        cur.append(s)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def collate(batch: list[Row], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) tensors; position t of the (B, T - 1) ones holds the prediction of token t + 1.

    ``mask`` is 1 on the sampled tokens; ``old``, ``adv``, ``ref`` are their behaviour log-probs, advantage
    and reference log-probs; ``row_w`` the traj-mean weight of each token (w / T_d, w = 1 / decisions in
    its trajectory, T_d = tokens of its decision) and ``seq_len`` T_d (see loss.agg_loss). Prompt,
    environment and padding positions are 0 in all of them.
    """
    width = max(len(r) for r in batch)
    n = len(batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask, old, adv, ref, row_w, seq_len = (torch.zeros((n, width - 1)) for _ in range(6))
    for i, row in enumerate(batch):
        ids[i, : len(row)] = torch.tensor(row.ids)
        attn[i, : len(row)] = 1
        for s in row.samples:
            lo = len(s.prompt_ids) - 1  # logits at t predict token t+1
            hi = lo + len(s.response_ids)
            mask[i, lo:hi] = 1.0
            old[i, lo:hi] = torch.tensor(s.old_logprobs, dtype=torch.float32)
            adv[i, lo:hi] = s.advantage if s.is_weights is None else s.advantage * torch.tensor(s.is_weights)
            row_w[i, lo:hi] = s.traj_weight / len(s.response_ids)
            seq_len[i, lo:hi] = len(s.response_ids)
            if s.ref_logprobs is not None:
                ref[i, lo:hi] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
    return {k: v.to(device) for k, v in dict(ids=ids, attn=attn, mask=mask, old=old, adv=adv, ref=ref,
                                             row_w=row_w, seq_len=seq_len).items()}
