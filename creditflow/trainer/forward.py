"""How the policy is run on training rows: one :class:`Forward`, built once per run from its config.

``Forward(pad_id, token_budget, pad, autocast, share_prefix)`` packs rows into micro-batches
(:func:`~creditflow.trainer.sequences.pack_microbatches`), collates them, and computes the logits at the trained
positions only (:meth:`Forward.trained_logits`) or every decision's log-probs (:meth:`Forward.logprobs`). The
update, the reference log-probs and the rollout/trainer gap all run through it, so they see the rows the
same way.

Two things keep that pass cheap, and both live here:

* the LM head is applied to the trained positions only (the model's logits must be its output embedding
  of the decoder's last hidden states; :func:`plain_head` checks that once per model and caches it);
* with ``share_prefix`` (``policy.share_prefix``) each distinct row, and each prefix several rows share, goes
  through the decoder once (:func:`trained_hidden`, over the prefix tree cut by :func:`prefix_levels`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator

import torch
from transformers.cache_utils import DynamicLayer

from creditflow.config import PolicyConfig, RLConfig, RolloutConfig
from creditflow.policy.load import mixed_precision
from creditflow.trainer.loss import token_logprobs
from creditflow.trainer.sequences import Row, collate, decisions, pack_microbatches

# policy.share_prefix: a micro-batch's distinct rows go through the model level by level of their prefix
# tree, at most PREFIX_LEVELS forward passes; a level is cut only where it saves more token positions than
# LEVEL_COST (the price of one more pass on the tiny policy, measured in step_cost.md)
PREFIX_LEVELS = 4
LEVEL_COST = 32


@dataclass(frozen=True)
class Forward:
    """How the policy runs on training rows.

    ``pad_id``: the tokenizer's padding id. ``token_budget`` (``rl.token_budget``): rows x longest row per
    micro-batch. ``pad``: rows of different lengths share a micro-batch (``False``: equal lengths only, see
    :func:`~creditflow.trainer.sequences.pack_microbatches`; the conversation layout's choice). ``autocast``
    (``policy.autocast``): the passes in bfloat16, logits back in float32. ``share_prefix``
    (``policy.share_prefix``): distinct rows and shared prefixes computed once, in at most ``max_levels``
    passes of a prefix tree whose levels each save more than ``level_cost`` positions. ``clock(phase)``, if
    given, is entered around each phase of an update's work (:func:`creditflow.trainer.rl.policy_update`;
    benchmarks/step_cost.py times them).
    """

    pad_id: int
    token_budget: int
    pad: bool = True
    autocast: str = "none"
    share_prefix: bool = True
    max_levels: int = PREFIX_LEVELS
    level_cost: int = LEVEL_COST
    clock: Callable[[str], ContextManager] | None = field(default=None, compare=False)

    @classmethod
    def from_sections(cls, rl: RLConfig, rollout: RolloutConfig, policy: PolicyConfig, pad_id: int) -> Forward:
        """The run's forward pass: ``rl.token_budget``, ``policy.autocast``, ``policy.share_prefix``, and
        padding unless the rows are whole conversations (``rollout.history``)."""
        return cls(pad_id, rl.token_budget, pad=rollout.history == "window", autocast=policy.autocast,
                   share_prefix=policy.share_prefix)

    def batches(self, rows: list[Row], device) -> Iterator[tuple[list[Row], dict[str, torch.Tensor]]]:
        """Each micro-batch of ``rows``, with its collated tensors (:func:`~creditflow.trainer.sequences.collate`)."""
        for micro in pack_microbatches(rows, self.token_budget, self.pad):
            yield micro, collate(micro, self.pad_id, device)

    def trained_logits(self, model, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (N, V) and targets (N,) at the N trained positions of a collated batch only, in row-major
        order: the LM head is applied to those positions' hidden states, never to prompt or environment
        positions. The logits are float32 under ``autocast`` too."""
        keep = b["mask"].bool()
        targets = b["ids"][:, 1:][keep]
        with mixed_precision(model, self.autocast):
            if plain_head(model):
                hidden = trained_hidden(model.get_decoder(), b["ids"], b["attn"], keep, self.share_prefix,
                                        self.max_levels, self.level_cost)
                logits = model.get_output_embeddings()(hidden)
            else:
                logits = model(input_ids=b["ids"], attention_mask=b["attn"]).logits[:, :-1][keep]
        return logits.float(), targets

    @torch.inference_mode()
    def logprobs(self, model, rows: list[Row]) -> list[list[float]]:
        """log pi(a|s) of every decision's sampled tokens under ``model`` as it is, in the order of
        :func:`~creditflow.trainer.sequences.decisions` (``rows``)."""
        device = next(model.parameters()).device
        found: dict[int, list[float]] = {}  # by id() of the sample: the micro-batches hold the rows by length
        for micro, b in self.batches(rows, device):
            logits, targets = self.trained_logits(model, b)
            lp = token_logprobs(logits, targets).tolist()  # row-major: rows in order, their decisions in order
            at = 0
            for s in decisions(micro):
                found[id(s)] = lp[at: at + len(s.response_ids)]
                at += len(s.response_ids)
        return [found[id(s)] for s in decisions(rows)]


def spread(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Values at the trained positions (N,) back into the batch layout (B, T), zeros elsewhere."""
    return torch.zeros(mask.shape, dtype=values.dtype, device=values.device).masked_scatter(mask.bool(), values)


_PLAIN_HEAD: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def plain_head(model) -> bool:
    """Whether the model's logits are its output embedding applied to the decoder's last hidden states
    (Qwen2 / Llama style; not where logits are post-processed, e.g. Gemma-2's soft-capping). Checked once
    per model on a few tokens."""
    if model not in _PLAIN_HEAD:
        ids = torch.arange(4, device=next(model.parameters()).device)[None] % model.config.vocab_size
        with torch.inference_mode():
            full = model(input_ids=ids).logits
            head = model.get_output_embeddings()(model.get_decoder()(input_ids=ids).last_hidden_state)
        _PLAIN_HEAD[model] = bool(torch.allclose(full.float(), head.float(), rtol=1e-4, atol=1e-4))
    return _PLAIN_HEAD[model]


def adjacent_lcp(key: torch.Tensor) -> torch.Tensor:
    """Common-prefix length of each pair of consecutive rows of ``key`` (U, T) -> (U - 1,)."""
    return (key[1:] == key[:-1]).long().cumprod(1).sum(1)


def prefix_levels(width: int, lcp: torch.Tensor, max_levels: int | None = None,
                  level_cost: int | None = None) -> list[int]:
    """Depths ``0 = d_0 < d_1 < ... < d_K = width`` (K <= ``max_levels``) at which to cut the prefix tree of
    lexicographically sorted distinct rows whose consecutive common prefixes are ``lcp``.

    Level k runs positions ``d_k .. d_{k+1} - 1`` once per distinct prefix of length ``d_{k+1}``; with
    sorted rows that count is ``1 + #(lcp < d_{k+1})``. The cuts minimise the positions computed plus
    ``level_cost`` per level (dynamic programme over the depths where rows part, which is where an optimal
    cut lies). One level (``[0, width]``) is every distinct row in full. Defaults: ``PREFIX_LEVELS`` and
    ``LEVEL_COST``."""
    max_levels = PREFIX_LEVELS if max_levels is None else max_levels
    level_cost = LEVEL_COST if level_cost is None else level_cost
    if len(lcp) == 0:
        return [0, width]
    depths = sorted({0, width, *(int(d) for d in lcp.unique() if 0 < int(d) < width)})
    prefixes = [1 + int((lcp < d).sum()) for d in depths]
    n, inf = len(depths), float("inf")
    best = [[inf] * n for _ in range(max_levels + 1)]  # best[k][j]: positions up to depths[j] in k levels
    came = [[0] * n for _ in range(max_levels + 1)]
    best[0][0] = 0.0
    for k in range(1, max_levels + 1):
        for j in range(1, n):
            for i in range(j):
                cost = best[k - 1][i] + prefixes[j] * (depths[j] - depths[i]) + level_cost
                if cost < best[k][j]:
                    best[k][j], came[k][j] = cost, i
    k = min(range(1, max_levels + 1), key=lambda k: best[k][n - 1])
    cuts, j = [width], n - 1
    for k in range(k, 0, -1):
        j = came[k][j]
        cuts.append(depths[j])
    return cuts[::-1]


def trained_hidden(decoder, ids: torch.Tensor, attn: torch.Tensor, keep: torch.Tensor, share: bool = True,
                   max_levels: int | None = None, level_cost: int | None = None) -> torch.Tensor:
    """The decoder's last hidden states (N, H) at the N trained positions ``keep`` (B, T - 1) of right-padded
    rows ``ids`` / ``attn`` (B, T), in row-major order.

    With ``share``, each distinct row is computed once (group rollouts of one task repeat prompts and, at
    low entropy, whole responses), and so is each prefix several rows share: the rows are sorted into their
    prefix tree, which is cut into at most ``max_levels`` levels (:func:`prefix_levels`); a level runs
    each distinct prefix's next span of tokens once, attending to its parent prefix's keys/values as a
    cache, and hands each child a view of them. On window rows the levels are the template's instruction
    (shared by every row), the step count and history a group's rows share, and each row's own tail.
    Causal attention makes this exact: a position's hidden state depends on its own tokens and the ones
    before it only; the gradients of a shared span are the sums over the rows that share it. Rows of a
    model whose cache is not a plain dynamic cache (sliding-window layers, ...) fall back to the full
    forward.
    """
    rows, cols = keep.nonzero(as_tuple=True)
    if not share or len(rows) == 0:
        return decoder(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1][keep]
    key = torch.where(attn.bool(), ids, torch.full_like(ids, -1))  # -1: padding
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)  # sorted lexicographically
    lcp = adjacent_lcp(distinct)
    cuts = prefix_levels(distinct.shape[1], lcp, max_levels, level_cost)  # [0, width]: every distinct row in full
    at, parts = [], []  # which trained positions each level returns, and their hidden states
    cache, parent_of = None, None
    for lo, hi in zip(cuts, cuts[1:]):
        starts = torch.ones(len(distinct), dtype=torch.bool, device=ids.device)
        starts[1:] = lcp < hi  # a distinct row starts a new prefix of length hi
        prefix_of = starts.long().cumsum(0) - 1  # each distinct row's prefix at depth hi
        first = starts.nonzero(as_tuple=True)[0]  # one distinct row per prefix
        if cache is not None:  # each prefix attends to its parent's keys/values (a gather: gradients add up)
            for layer in cache.layers:
                layer.keys = layer.keys.index_select(0, parent_of[first])
                layer.values = layer.values.index_select(0, parent_of[first])
        span = distinct[first, :hi]
        positions = torch.arange(lo, hi, device=ids.device).expand(len(first), -1)
        deeper = hi < cuts[-1]  # a next level attends to this one's keys/values
        out = decoder(input_ids=span[:, lo:].clamp_min(0), attention_mask=(span >= 0).long(),
                      position_ids=positions, past_key_values=cache, use_cache=deeper)
        cache = out.past_key_values if deeper else None
        if deeper and not all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None])):
            return decoder(input_ids=ids, attention_mask=attn).last_hidden_state[rows, cols]
        inside = ((cols >= lo) & (cols < hi)).nonzero(as_tuple=True)[0]
        at.append(inside)
        parts.append(out.last_hidden_state[prefix_of[inverse[rows[inside]]], cols[inside] - lo])
        parent_of = prefix_of
    order = torch.empty(len(rows), dtype=torch.long, device=ids.device)
    order[torch.cat(at)] = torch.arange(len(rows), device=ids.device)
    return torch.cat(parts)[order]
