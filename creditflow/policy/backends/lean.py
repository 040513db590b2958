"""The lean decoder: the forward pass of the Qwen2 and LLaMA architectures (the tiny default policy, SmolLM2)
written out as a few fused tensor operations over the sampling loop's preallocated key/value buffers.

Why: at generation's batch sizes on a CPU the transformers model call costs far more than its arithmetic (the
module tree, the 4-D mask it builds from the 2-D one at every call, the cache objects; about 28 ms per decode
step of the tiny policy at batch 64 against about 1 ms of arithmetic, ``benchmarks/results/step_cost_1201.md``).
This module computes the same function with one matrix product for q/k/v and one for gate/up per layer, the
rotary embedding from a table built once per call, the keys/values written in place, one
``scaled_dot_product_attention`` per layer on the grouped key/value heads, and the LM head on the last position
only.

It is the reference model's own arithmetic in another order of the same operations: the weights are the
model's (q/k/v and gate/up concatenated, refreshed when an optimizer step changes them), the rotary table comes
from the model's own rotary module, the norms are transformers' RMSNorm formula. Its logits equal the model
call's to float32 rounding (``tests/policy/test_lean_decode.py``, on the tiny policy and on SmolLM2).

:func:`unsupported` says why a model cannot take this path (then the backend keeps the transformers call).
"""

from __future__ import annotations

import weakref

import torch
import torch.nn.functional as F

# the concatenated weights of each model: (the parameters' pointers and versions, per-layer weights)
_FUSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
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
    """The forward pass of a Qwen2 / LLaMA causal LM (``model``) over preallocated key/value buffers.

    The buffers are the sampling loop's (``hf._Preallocated`` layers: ``buffer_keys`` / ``buffer_values`` of
    shape (B, kv heads, capacity, head dim) and ``length``, the columns written so far); every row writes its
    new tokens at the same columns, as the loop's left-padded layout has it.
    """

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
        """cos / sin of positions 0 .. n-1 from the model's own rotary module, (n, head dim)."""
        have = self._rope
        if have is None or have[0].shape[0] < n or have[0].dtype != dtype or have[0].device != torch.device(device):
            positions = torch.arange(max(n, 256), device=device)[None]
            probe = torch.empty(0, dtype=dtype, device=device)
            with torch.no_grad():
                cos, sin = self.model.model.rotary_emb(probe, positions)
            self._rope = (cos[0], sin[0])
        return self._rope

    # -- the forward pass ------------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, pos: torch.Tensor, cache: LeanCache) -> torch.Tensor:
        """Logits (B, V), float32, at the last column of ``ids`` (B, T), whose positions are ``pos`` (B, T), on
        top of ``cache``, which takes the T new columns (``cache.valid`` says which of them are real)."""
        self.refresh()
        model = self.model
        b, t = ids.shape
        start, end = cache.length, cache.length + t
        x = model.model.embed_tokens(ids)
        cos, sin = self.rope(int(pos.max()) + 1, x.dtype, x.device)
        cos, sin = cos[pos][:, None], sin[pos][:, None]  # (B, 1, T, D)
        valid = cache.valid[:, :end]
        if t == 1:  # (B, 1, 1, end): -inf at the pads; every row has real columns (its prompt)
            mask = torch.zeros(valid.shape, dtype=cache.dtype, device=x.device).masked_fill(~valid, float("-inf"))
            mask = mask[:, None, None]
        else:  # (B, 1, T, end): the real columns, causally, and the diagonal (a pad query attends to itself)
            cols = torch.arange(end, device=ids.device)
            rows = torch.arange(start, end, device=ids.device)[:, None]
            mask = ((valid[:, None, None] & (cols <= rows)) | (cols == rows))
        hq, hk, d = self.heads, self.kv_heads, self.head_dim
        for w, layer, prefix in zip(self._layers, cache.layers, cache.prefix or [None] * len(cache.layers)):
            h = _rms_norm(x, w.norm1, self.eps)
            qkv = F.linear(h, w.qkv, w.qkv_bias).view(b, t, hq + 2 * hk, d).transpose(1, 2)  # (B, heads, T, D)
            qk, v = qkv[:, :hq + hk], qkv[:, hq + hk:]
            qk = qk * cos + _rotate_half(qk) * sin
            layer.buffer_keys[:, :, start:end] = qk[:, hq:]
            layer.buffer_values[:, :, start:end] = v
            keys, values = layer.buffer_keys[:, :, :end], layer.buffer_values[:, :, :end]
            with torch.autocast(x.device.type, enabled=False):  # in the cache's dtype (float32 on CPU)
                a = _attention(qk[:, :hq].to(keys.dtype), keys, values, mask, prefix)
            x = x + F.linear(a.transpose(1, 2).reshape(b, t, hq * d).to(x.dtype), w.o, w.o_bias)
            h = _rms_norm(x, w.norm2, self.eps)
            gate, up = F.linear(h, w.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w.down)
        cache.advance(t)
        last = _rms_norm(x[:, -1], model.model.norm.weight, self.eps)
        return model.get_output_embeddings()(last).float()


class LeanCache:
    """The sampling loop's keys/values for the lean decoder: per layer, the rows' buffers (``layers``:
    ``hf._Preallocated``, (B, kv heads, capacity, head dim), every row writing its new tokens at the same
    columns) and ``prefix``, the keys/values (kv heads, P, head dim) of the P tokens every row starts with,
    held once for the batch (None: no such prefix). ``valid`` (B, capacity): which columns hold a real token
    (the first ``prompt_valid.shape[1]`` given, the later ones set as tokens are fed)."""

    def __init__(self, layers, prefix, prompt_valid: torch.Tensor, capacity: int):
        self.layers, self.prefix = layers, prefix
        self.length = layers[0].length
        self.dtype = layers[0].buffer_keys.dtype
        self.valid = torch.zeros((prompt_valid.shape[0], capacity), dtype=torch.bool, device=prompt_valid.device)
        self.valid[:, :prompt_valid.shape[1]] = prompt_valid

    def advance(self, t: int) -> None:
        self.length += t
        for layer in self.layers:
            layer.length = self.length
            layer.keys = layer.buffer_keys[:, :, :self.length]
            layer.values = layer.buffer_values[:, :, :self.length]

    def forward_with(self, lean: LeanDecoder):
        """The sampling loop's ``forward(ids, pos, fed)``: marks the fed tokens' column, runs ``lean``."""

        def forward(ids: torch.Tensor, pos: torch.Tensor, fed: torch.Tensor | None) -> torch.Tensor:
            if fed is not None:
                self.valid[:, self.length] = fed
            return lean.forward(ids, pos, self)

        return forward


def _attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
               prefix: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """Attention of queries ``q`` (B, heads, T, D) over the shared ``prefix`` (kv heads, P, D), if any, and each
    row's own ``keys`` / ``values`` (B, kv heads, L, D) under ``mask``: (B, 1, T, L) bool for T > 1, (B, 1, 1, L)
    additive for T = 1. Grouped heads: query head h reads key/value head h // (heads / kv heads).

    T > 1 (prompts): ``scaled_dot_product_attention`` with the prefix in front of every row's keys. T = 1 (a
    decode step): the scores against the prefix are one matrix product for the whole batch (every row's
    queries against the same keys), those against each row's own columns a batched one; one softmax over both.
    """
    b, hq, t, d = q.shape
    hk = keys.shape[1]
    if t > 1:
        if prefix is not None:
            p = prefix[0].shape[1]
            keys = torch.cat([prefix[0].expand(b, -1, -1, -1), keys], 2)
            values = torch.cat([prefix[1].expand(b, -1, -1, -1), values], 2)
            mask = torch.cat([mask.new_ones((b, 1, t, p)), mask], -1)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=hq != hk)
    g = hq // hk
    q = q.view(b, hk, g, d) * d ** -0.5
    scores = torch.matmul(q, keys.transpose(-1, -2)) + mask  # (B, kv heads, g, L)
    if prefix is None:
        return torch.matmul(scores.softmax(-1), values).view(b, hq, 1, d)
    p = prefix[0].shape[1]
    on_prefix = torch.matmul(q.transpose(0, 1).reshape(hk, b * g, d), prefix[0].transpose(-1, -2))  # (hk, B g, P)
    probs = torch.cat([on_prefix.view(hk, b, g, p).transpose(0, 1), scores], -1).softmax(-1)
    out = torch.matmul(probs[..., p:], values)
    from_prefix = torch.matmul(probs[..., :p].transpose(0, 1).reshape(hk, b * g, p), prefix[1])  # (hk, B g, D)
    return (out + from_prefix.view(hk, b, g, d).transpose(0, 1)).reshape(b, hq, 1, d)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Qwen2RMSNorm / LlamaRMSNorm: normalised in float32, scaled in the input's dtype."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
