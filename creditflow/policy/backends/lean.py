"""The lean decoder: the forward pass of the Qwen2 and LLaMA architectures (the tiny default policy, SmolLM2)
written out as a few fused tensor operations over the sampling loop's own key/value buffers.

Why: the transformers model call walks its module tree, builds a 4-D mask from the 2-D one and updates its cache
objects at every call, and attends over every row's own copy of the keys/values. This module computes the same
function with one matrix product for q/k/v and one for gate/up per layer, the rotary embedding from a table
built once, the keys/values written in place, and the LM head on the last position only; the keys/values are
held in three parts (:class:`LeanCache`): the prefix every prompt of the batch starts with (the template's
instruction) once, each distinct cached prompt once for the rows that share it, and each row's own tokens, so a
decode step reads each of them once. Measured in CPU seconds on a shared 2-core host: 1.4x fewer per decode step
of the tiny policy at batch 64 on a group's first turn, 1.2-1.35x on the third; 1.1-1.3x for SmolLM2, whose
decode step at small batches is bound by reading its weights (benchmarks/results/step_cost_lean.md). On a quiet
host, 1.7x at batch 64, where its matrix products and the seeded draw take 41% of its step and the rest is
attention and many small operations (benchmarks/results/decode_floor.md).

It is the reference model's own arithmetic in another order of the same operations: the weights are the
model's (q/k/v and gate/up concatenated, refreshed when an optimizer step changes them), the rotary table comes
from the model's own rotary module, the norms are transformers' RMSNorm formula. Its logits equal the model
call's to float32 rounding (``tests/policy/test_lean_decode.py``, on the tiny policy and on SmolLM2).

:func:`unsupported` says why a model cannot take this path (then the backend keeps the transformers call).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

# the concatenated weights of each model: (the parameters' pointers and versions, per-layer weights)
_FUSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# rows per distinct cached prompt from which its keys/values are held once for its rows (a group's first turn:
# G rows per prompt); below, the gathers cost more than the copies save (measured on the tiny policy, 2 rows)
GROUP_ROWS = 4
# architectures whose decoder layer this module reproduces (transformers' Qwen2ForCausalLM, LlamaForCausalLM)
ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


def unsupported(model) -> str | None:
    """Why ``model`` cannot run through the lean decoder, or None when it can."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES or type(model).__name__ != ARCHITECTURES[kind]:
        return f"{type(model).__name__} is not one of the lean decoder's architectures ({', '.join(ARCHITECTURES.values())})"
    if hasattr(model, "peft_config") or any("lora" in name for name, _ in model.named_modules()):
        return "a LoRA (PEFT) model: its adapted layers are not plain linear layers"
    if getattr(config, "mlp_bias", False):
        return "mlp_bias=true (the lean decoder's MLP has no biases)"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act={config.hidden_act!r} (the lean decoder computes SiLU)"
    types = getattr(config, "layer_types", None) or []
    sliding = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    if sliding or any(t != "full_attention" for t in types):
        return "sliding-window attention layers"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if "dynamic" in rope:
        return f"rope_type={rope!r} (its frequencies depend on the sequence length)"
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear) or getattr(config, "final_logit_softcapping", None):
        return "logits that are not a plain linear head of the last hidden states"
    return None


class _Weights:
    """One decoder layer's weights, q/k/v and gate/up concatenated."""

    __slots__ = ("qkv", "qkv_bias", "o", "o_bias", "gate_up", "down", "norm1", "norm2")

    def __init__(self, layer):
        att, mlp = layer.self_attn, layer.mlp
        self.qkv = torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight])
        biases = [att.q_proj.bias, att.k_proj.bias, att.v_proj.bias]
        self.qkv_bias = None if biases[0] is None else torch.cat(biases)
        self.o, self.o_bias = att.o_proj.weight, att.o_proj.bias
        self.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        self.down = mlp.down_proj.weight
        self.norm1, self.norm2 = layer.input_layernorm.weight, layer.post_attention_layernorm.weight


class LeanDecoder:
    """The forward pass of a Qwen2 / LLaMA causal LM (``model``) over a :class:`LeanCache`."""

    def __init__(self, model):
        reason = unsupported(model)
        if reason:
            raise ValueError(f"the lean decoder cannot run this model: {reason}")
        self.model = model
        config = model.config
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self._layers: list[_Weights] = []
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None

    # -- weights and rotary table ----------------------------------------------------------------------
    def refresh(self) -> None:
        """Rebuild the concatenated weights if any parameter changed since they were built (an optimizer step
        writes in place and bumps the tensors' version counters). One copy per model, shared by its decoders
        (a run's training and evaluation engines)."""
        key = tuple((p.data_ptr(), p._version) for p in self.model.parameters())
        have = _FUSED.get(self.model)
        if have is None or have[0] != key:
            with torch.no_grad():
                have = (key, [_Weights(layer) for layer in self.model.model.layers])
            _FUSED[self.model] = have
        self._layers = have[1]

    def rope(self, n: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos / sin of positions 0 .. n-1 from the model's own rotary module, (n, head dim); the sin's first
        half negated, so that ``x * cos + x.roll(D / 2) * sin`` is transformers' ``x * cos + rotate_half(x) *
        sin``."""
        have = self._rope
        if have is None or have[0].shape[0] < n or have[0].dtype != dtype or have[0].device != torch.device(device):
            positions = torch.arange(max(n, 256), device=device)[None]
            probe = torch.empty(0, dtype=dtype, device=device)
            with torch.no_grad():
                cos, sin = self.model.model.rotary_emb(probe, positions)
            half = sin.shape[-1] // 2
            self._rope = (cos[0], torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1))
        return self._rope

    # -- the forward pass ------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, pos: torch.Tensor, cache: LeanCache) -> torch.Tensor:
        """Logits (B, V), float32, at the last column of ``ids`` (B, T), whose positions are ``pos`` (B, T), on
        top of ``cache``, whose rows take the T new columns (``cache.valid`` says which of them are real)."""
        self.refresh()
        model = self.model
        b, t = ids.shape
        x = model.model.embed_tokens(ids)
        cos, sin = self.rope(cache.positions, x.dtype, x.device)
        cos, sin = cos[pos][:, None], sin[pos][:, None]  # (B, 1, T, D)
        masks = cache.masks(t)
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        for layer, w in enumerate(self._layers):
            h = _rms_norm(x, w.norm1, self.eps)
            qkv = F.linear(h, w.qkv, w.qkv_bias).view(b, t, hq + 2 * hk, d).transpose(1, 2)  # (B, heads, T, D)
            qk = qkv[:, :hq + hk]
            qk = qk * cos + qk.roll(d // 2, -1) * sin  # sin carries rotate_half's sign
            cache.write(layer, qk[:, hq:], qkv[:, hq + hk:])
            with torch.autocast(x.device.type, enabled=False):  # in the cache's dtype (float32 on CPU)
                a = cache.attend(layer, qk[:, :hq], masks)
            x = x + F.linear(a.transpose(1, 2).reshape(b, t, hq * d).to(x.dtype), w.o, w.o_bias)
            h = _rms_norm(x, w.norm2, self.eps)
            gate, up = F.linear(h, w.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w.down)
        cache.length += t
        last = _rms_norm(x[:, -1], model.model.norm.weight, self.eps)
        return model.get_output_embeddings()(last).float()


@dataclass(frozen=True)
class KVLayout:
    """The keys/values a cache holds per row: ``layers`` of (``kv_heads``, columns, ``head_dim``), in ``dtype`` on
    ``device``."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype
    device: Any


class LeanCache:
    """The sampling loop's keys/values for the lean decoder, in three parts whose columns a row attends to
    together (attention does not depend on the order of the keys: the positions are in them):

    * ``prefix``: the P tokens every prompt starts with and every row has cached, once for the batch (per
      layer (kv heads, P, head dim); None without);
    * ``groups``: each distinct cached prompt's tokens after the prefix, once for the rows that extend it
      (per layer (G, kv heads, W, head dim), left-padded; ``group_of`` (B,) says whose each row reads);
    * the rows' own columns: the uncached tail of the prompt (left-padded, ``ids`` / ``pos``) and the tokens
      generated after it (per layer (B, kv heads, width + max_new, head dim); ``valid`` marks the real ones).

    ``found``: each prompt's cached sequence (``hf._Cached``: ids, per-layer keys/values) or None.
    """

    def __init__(self, prompts: list[list[int]], found: list, max_new: int, layout: KVLayout, pad_id: int):
        layers, kv_heads, head_dim, dtype, device = (layout.layers, layout.kv_heads, layout.head_dim, layout.dtype,
                                                     layout.device)
        b = len(prompts)
        cached = [len(c.ids) if c is not None else 0 for c in found]
        self.shared = shared = _common_prefix(prompts, min(cached)) if b > 1 else 0
        self.prefix = [(k[:, :shared], v[:, :shared]) for k, v in found[0].kv] if shared else None
        # groups: the distinct cached prompts with tokens after the prefix; rows with none read an empty group
        owners, index, group_of = [], {}, []
        for c, n in zip(found, cached):
            if c is not None and n > shared:
                group_of.append(index.setdefault(id(c), len(owners)))
                if group_of[-1] == len(owners):
                    owners.append(c)
            else:
                group_of.append(-1)
        members = [[i for i, g in enumerate(group_of) if g == j] for j in range(len(owners))]
        self.groups = None
        # groups of GROUP_ROWS rows or more on average pay for their gathers; else each row holds its cached
        # columns in front of its own ones
        own_cached = 0
        if members and len(prompts) >= GROUP_ROWS * len(members):
            self._group(owners, group_of, members, layout, b)
        elif members:
            own_cached = max(len(c.ids) for c in owners) - shared
        # the rows' own columns: [cached (singleton groups) | the uncached tail of each prompt | generated tokens]
        new = [p[n:] for p, n in zip(prompts, cached)]
        width = max(len(t) for t in new)
        self.positions = max(len(p) for p in prompts) + max_new  # the rotary table's length
        self.ids = torch.full((b, width), pad_id, dtype=torch.long)
        self.pos = torch.zeros((b, width), dtype=torch.long)
        self.valid = torch.zeros((b, own_cached + width + max_new), dtype=torch.bool)
        for i, (n, t) in enumerate(zip(cached, new)):
            self.ids[i, width - len(t):] = torch.tensor(t, dtype=torch.long)
            self.pos[i, width - len(t):] = torch.arange(n, n + len(t))
            self.valid[i, own_cached + width - len(t):own_cached + width] = True
        self.ids, self.pos = self.ids.to(device), self.pos.to(device)
        shape = (b, kv_heads, own_cached + width + max_new, head_dim)
        self.rows = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                     for _ in range(layers)]
        if own_cached:
            for i, c in enumerate(found):
                if group_of[i] >= 0:
                    n = len(c.ids) - shared
                    self.valid[i, own_cached - n:own_cached] = True
                    for (rk, rv), (k, v) in zip(self.rows, c.kv):
                        rk[i, :, own_cached - n:own_cached], rv[i, :, own_cached - n:own_cached] = k[:, shared:], v[:, shared:]
        self.valid = self.valid.to(device)
        self.length = own_cached  # the rows' columns written so far
        self.dtype = dtype

    def _group(self, owners, group_of, members, layout: KVLayout, b: int) -> None:
        """The group part: each distinct cached prompt's columns after the prefix, once."""
        layers, kv_heads, head_dim, dtype, device = (layout.layers, layout.kv_heads, layout.head_dim, layout.dtype,
                                                     layout.device)
        shared = self.shared
        if -1 in group_of:  # rows with nothing cached after the prefix read an empty group
            members.append([i for i, g in enumerate(group_of) if g < 0])
            owners.append(None)
            group_of = [len(owners) - 1 if g < 0 else g for g in group_of]
        width = max(len(c.ids) for c in owners if c is not None) - shared
        shape = (len(owners), kv_heads, width, head_dim)
        self.groups = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                       for _ in range(layers)]
        valid = torch.zeros((len(owners), width), dtype=torch.bool)
        for j, c in enumerate(owners):
            if c is not None:
                n = len(c.ids) - shared
                valid[j, width - n:] = True
                for (gk, gv), (k, v) in zip(self.groups, c.kv):
                    gk[j, :, width - n:], gv[j, :, width - n:] = k[:, shared:], v[:, shared:]
        self.group_valid = valid.to(device)
        # the rows of each group side by side (G, most rows of a group), padded with row B (zero queries)
        most = max(len(m) for m in members)
        self.grid = torch.tensor([m + [b] * (most - len(m)) for m in members], device=device)
        self.slot = torch.tensor([j * most + members[j].index(i) for i, j in enumerate(group_of)], device=device)
        self.group_of = torch.tensor(group_of, device=device)

    def forward_with(self, lean: LeanDecoder):
        """The sampling loop's ``forward(ids, pos, fed)``: marks the fed tokens' column, runs ``lean``."""

        def forward(ids: torch.Tensor, pos: torch.Tensor, fed: torch.Tensor | None) -> torch.Tensor:
            if fed is not None:
                self.valid[:, self.length] = fed
            return lean.forward(ids, pos, self)

        return forward

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """The new tokens' keys / values (B, kv heads, T, D) into the rows' next T columns."""
        end = self.length + keys.shape[2]
        self.rows[layer][0][:, :, self.length:end] = keys
        self.rows[layer][1][:, :, self.length:end] = values

    def masks(self, t: int) -> dict[str, torch.Tensor]:
        """The masks of a call feeding T tokens per row: for T = 1 additive (-inf at pads) per part; for T > 1
        one boolean mask over [prefix | group | row columns] (causal in the rows' part; a pad query attends to
        itself, so no row of the attention is empty)."""
        end = self.length + t
        valid = self.valid[:, :end]
        b = valid.shape[0]
        if t == 1:
            out = {"row": _additive(valid, self.dtype)[:, None, None]}
            if self.groups is not None:
                out["group"] = _additive(self.group_valid, self.dtype)[:, None, None]
            return out
        cols = torch.arange(end, device=valid.device)
        rows = torch.arange(self.length, end, device=valid.device)[:, None]
        parts = [(valid[:, None, None] & (cols <= rows)) | (cols == rows)]  # (B, 1, T, end)
        if self.groups is not None:
            parts.insert(0, self.group_valid[self.group_of][:, None, None].expand(-1, -1, t, -1))
        if self.prefix is not None:
            parts.insert(0, valid.new_ones((b, 1, t, self.shared)))
        return {"all": torch.cat(parts, -1)}

    def attend(self, layer: int, q: torch.Tensor, masks: dict[str, torch.Tensor]) -> torch.Tensor:
        """Attention (B, heads, T, D) of queries ``q`` over the prefix, the row's group and its own columns.

        T > 1 (prompts): ``scaled_dot_product_attention`` over the three parts laid side by side per row.
        T = 1 (a decode step): the scores against the prefix are one matrix product for the whole batch, those
        against a group's columns one for the group's rows, those against each row's own columns a batched
        one; one softmax over all three; grouped query heads read their key/value head without a copy.
        """
        q = q.to(self.dtype)
        b, hq, t, d = q.shape
        end = self.length + t
        keys, values = self.rows[layer][0][:, :, :end], self.rows[layer][1][:, :, :end]
        hk = keys.shape[1]
        if t > 1:
            parts_k, parts_v = [keys], [values]
            if self.groups is not None:
                parts_k.insert(0, self.groups[layer][0][self.group_of])
                parts_v.insert(0, self.groups[layer][1][self.group_of])
            if self.prefix is not None:
                parts_k.insert(0, self.prefix[layer][0].expand(b, -1, -1, -1))
                parts_v.insert(0, self.prefix[layer][1].expand(b, -1, -1, -1))
            return F.scaled_dot_product_attention(q, torch.cat(parts_k, 2), torch.cat(parts_v, 2),
                                                  attn_mask=masks["all"], enable_gqa=hq != hk)
        g = hq // hk
        q = q.view(b, hk, g, d) * d ** -0.5
        scores = [torch.matmul(q, keys.transpose(-1, -2)) + masks["row"]]  # (B, kv heads, g, L)
        if self.groups is not None:
            gk, gv = self.groups[layer]
            n, width, most = gk.shape[0], gk.shape[2], self.grid.shape[1]
            grouped = _by_group(q, self.grid)  # (G, kv heads, most g, D)
            on_group = torch.matmul(grouped, gk.transpose(-1, -2)) + masks["group"]  # (G, kv heads, most g, W)
            scores.insert(0, _by_row(on_group, self.slot, g))
        if self.prefix is not None:
            pk, pv = self.prefix[layer]
            p = pk.shape[1]
            on_prefix = torch.matmul(q.transpose(0, 1).reshape(hk, b * g, d), pk.transpose(-1, -2))  # (hk, Bg, P)
            scores.insert(0, on_prefix.view(hk, b, g, p).transpose(0, 1))
        probs = torch.cat(scores, -1).softmax(-1)
        at = probs.shape[-1] - keys.shape[2]
        out = torch.matmul(probs[..., at:], values)
        if self.groups is not None:
            out = out + _by_row(torch.matmul(_by_group(probs[..., at - width:at], self.grid), gv), self.slot, g)
        if self.prefix is not None:
            from_prefix = torch.matmul(probs[..., :p].transpose(0, 1).reshape(hk, b * g, p), pv)  # (hk, Bg, D)
            out = out + from_prefix.view(hk, b, g, d).transpose(0, 1)
        return out.reshape(b, hq, 1, d)

    def sequence_kv(self, i: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row ``i``'s keys / values per layer, (kv heads, its tokens, D): prefix, group, own real columns."""
        own = self.valid[i, :self.length].nonzero()[:, 0]
        if self.groups is not None:
            g = int(self.group_of[i])
            in_group = self.group_valid[g].nonzero()[:, 0]
        out = []
        for layer in range(len(self.rows)):
            ks, vs = [self.rows[layer][0][i][:, own]], [self.rows[layer][1][i][:, own]]
            if self.groups is not None:
                ks.insert(0, self.groups[layer][0][g][:, in_group])
                vs.insert(0, self.groups[layer][1][g][:, in_group])
            if self.prefix is not None:
                ks.insert(0, self.prefix[layer][0])
                vs.insert(0, self.prefix[layer][1])
            out.append((torch.cat(ks, 1), torch.cat(vs, 1)))
        return out


def _additive(valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(valid.shape, dtype=dtype, device=valid.device).masked_fill(~valid, float("-inf"))


def _by_group(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Per-row (B, kv heads, g, X) -> per-group (G, kv heads, most * g, X): each group's rows side by side
    (``grid`` (G, most): row indices, B for a pad, whose values are zeros)."""
    b, hk, g, x_ = x.shape
    padded = torch.cat([x, x.new_zeros((1, hk, g, x_))])[grid]  # (G, most, kv heads, g, X)
    return padded.transpose(1, 2).reshape(grid.shape[0], hk, grid.shape[1] * g, x_)


def _by_row(x: torch.Tensor, slot: torch.Tensor, g: int) -> torch.Tensor:
    """Per-group (G, kv heads, most * g, X) -> per-row (B, kv heads, g, X) (``slot``: each row's place)."""
    n, hk, mg, x_ = x.shape
    return x.view(n, hk, mg // g, g, x_).transpose(1, 2).reshape(n * (mg // g), hk, g, x_)[slot]


def _common_prefix(prompts: list[list[int]], limit: int) -> int:
    """Length of the longest prefix (at most ``limit`` tokens) that every prompt starts with."""
    first, n = prompts[0], min(limit, *(len(p) for p in prompts))
    for p in prompts[1:]:
        if p[:n] != first[:n]:
            n = next(j for j in range(n) if p[j] != first[j])
    return n


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Qwen2RMSNorm / LlamaRMSNorm: normalised in float32, scaled in the input's dtype (in float32:
    torch's fused kernel, the same formula)."""
    dtype = x.dtype
    if dtype == weight.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)
