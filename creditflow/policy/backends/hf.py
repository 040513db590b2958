"""Batched generation with a transformers model: one call per turn, left padding.

Behaviour log-probs are taken from the raw (untempered) logits of each sampled token, i.e.
log pi_old(a|s) of the policy itself, which is what the PPO ratio needs.

Paths:

* ``share_prefix`` (``policy.share_prefix``, default): a sampling loop over a preallocated key/value cache.
  Each distinct prompt of the batch is prefilled once, on top of the prefix all of them share (the
  template's instruction), prefilled once; every row then samples on its own.
* ``share_prefix=False``: transformers' ``generate`` on the left-padded prompts (with ``decode="lean"``: the
  sampling loop on every prompt in full).
* ``decode`` (``policy.decode``): the sampling loop's forward passes through the transformers model call
  (``hf``) or through :class:`~creditflow.policy.backends.lean.LeanDecoder` (``lean``: Qwen2 and LLaMA, the
  same logits to float32 rounding at a fraction of the call's overhead); ``auto``: lean where the model is
  one of those and ``share_prefix`` is on, else hf. The draws from the torch RNG are the same on both.
* inside ``with backend.prefix_cache():`` (the conversation layout, where turn t+1's prompt extends turn
  t's prompt and response): the sampling loop keeps every sequence's keys/values after each call and,
  when a later prompt extends one of those sequences, feeds only the new tokens (prompts that extend
  none are prefilled as above). The cache lives until the ``with`` block ends (one rollout: the weights
  do not change inside it).
* ``rollout_dtype="bf16"`` (``policy.rollout_dtype``): every path above runs on a bfloat16 copy of the
  float32 weights, made here and refreshed by :meth:`HFBackend.sync_weights` after each update (as verl's
  rollout engines run bf16 beside float32 training). The behaviour log-probs are then the copy's; the trainer
  logs their gap to its own (``train/rollout_logprob_gap``) and ``rl.tis_cap`` corrects it
  (:mod:`creditflow.trainer.mismatch`).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

from creditflow.policy.backends.base import Generation, SamplingParams
from creditflow.policy.backends.lean import KVLayout, LeanCache, LeanDecoder, unsupported
from creditflow.policy.load import mixed_precision


# tokens; a shorter shared prefix is not worth its own forward call (generation; the update weighs its levels
# in trainer/forward.py: prefix_levels)
MIN_SHARED_PREFIX = 16
# tokens between two checks, on an accelerator, of whether every row of the batch has stopped
STOP_CHECK = 8


@dataclass
class _Cached:
    """The keys/values (per layer, each (heads, len(ids), head_dim)) of a sequence's tokens ``ids``."""

    ids: list[int]
    kv: list[tuple[torch.Tensor, torch.Tensor]]


class _Preallocated(DynamicLayer):
    """A cache layer with room for the whole call: ``update`` writes into the buffer (DynamicLayer would
    concatenate, copying the whole cache at every generated token)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.buffer_keys, self.buffer_values, self.length = keys, values, length
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.buffer_keys[:, :, self.length:end] = key_states
        self.buffer_values[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self.buffer_keys[:, :, :end], self.buffer_values[:, :, :end]
        return self.keys, self.values


class HFBackend:
    """``autocast``: ``bf16`` runs generation's forward passes under bfloat16 autocast (``policy.autocast``), so
    the behaviour log-probs come from the same precision as the update's. ``rollout_dtype``: ``same``
    generates with ``model`` itself; ``bf16`` with a bfloat16 copy of its float32 weights
    (:func:`rollout_copy`; a model already in half precision is used as it is)."""

    def __init__(self, model, tokenizer, max_batch_size: int = 256, autocast: str = "none",
                 share_prefix: bool = True, decode: str = "auto", rollout_dtype: str = "same"):
        if rollout_dtype not in ("same", "bf16"):
            raise ValueError(f"rollout_dtype must be same or bf16, got {rollout_dtype!r}")
        self.copied = rollout_dtype == "bf16" and next(model.parameters()).dtype == torch.float32
        self.model = rollout_copy(model) if self.copied else model
        # the cached loop keeps full-attention caches; a model with sliding-window layers samples through generate
        self.share_prefix = share_prefix and _full_attention_only(model)
        self.lean = lean_decoder(self.model, decode, self.share_prefix)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.autocast = autocast
        self._cache: dict[int, list[_Cached]] | None = None  # by length, inside prefix_cache()

    def sync_weights(self, model) -> None:
        """The trained weights of ``model`` cast into the bf16 rollout copy (``rollout_dtype="bf16"``); without
        a copy nothing to push: this backend generates with the trained module itself."""
        if not self.copied:
            return
        trained = dict(model.named_parameters())
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                p.copy_(trained[name])  # in place: the lean decoder sees the new versions and re-fuses

    @property
    def device(self):
        return next(self.model.parameters()).device

    @contextmanager
    def prefix_cache(self):
        """Within this block, generation reuses the keys/values of the sequences the previous call produced
        (prompt + response) for the prompts that extend them."""
        self._cache = {}
        try:
            yield self
        finally:
            self._cache = None

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        with mixed_precision(self.model, self.autocast):
            return self._generate_all(prompts, params)

    def _generate_all(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        if self._cache is not None:
            found = [self._lookup(p) for p in prompts]
            kept: dict[int, list[_Cached]] = {}
            for start in range(0, len(prompts), self.max_batch_size):
                end = start + self.max_batch_size
                chunk, chunk_found = prompts[start:end], found[start:end]
                if self.share_prefix:  # the first turns: the group's prompts repeat
                    fresh = [i for i, c in enumerate(chunk_found) if c is None]
                    for i, c in zip(fresh, self._prefill_distinct([chunk[i] for i in fresh])):
                        chunk_found[i] = c
                gens, cached = self._generate_cached(chunk, chunk_found, params)
                out.extend(gens)
                for c in cached:
                    kept.setdefault(len(c.ids), []).append(c)
            self._cache = kept  # the next turn extends this turn's sequences
            return out
        for start in range(0, len(prompts), self.max_batch_size):
            chunk = prompts[start:start + self.max_batch_size]
            if self.share_prefix:
                out.extend(self._generate_cached(chunk, self._prefill_distinct(chunk), params, keep=False)[0])
            elif self.lean is not None:  # decode="lean" without sharing: every prompt in full through the loop
                out.extend(self._generate_cached(chunk, [None] * len(chunk), params, keep=False)[0])
            else:
                out.extend(self._generate(chunk, params))
        return out

    def _prefill_distinct(self, prompts: list[list[int]]) -> list[_Cached | None]:
        """The keys/values of every prompt but its last token, computed once per distinct prompt, on top of
        those of the prefix all prompts share (the template's instruction), computed once (``share_prefix``).

        A group's rollouts of one task repeat prompts (every first turn; later turns while the episodes
        agree), and every prompt starts with the same instruction, so a batch holds far fewer distinct
        prompt tokens than prompt tokens. The sampling loop (:meth:`_generate_cached`) copies these to the
        rows that need them and feeds the last tokens on top; attention is causal, so every row computes
        what it would alone. None for a one-token prompt.
        """
        if not prompts:
            return []
        greedy1 = SamplingParams(max_new_tokens=1, temperature=0.0)  # prefill only: no draw from the RNG
        distinct = list(dict.fromkeys(tuple(p) for p in prompts))
        shortest = min(len(p) for p in distinct)
        head = 0
        if len(distinct) > 1:
            while head < shortest - 2 and all(p[head] == distinct[0][head] for p in distinct):
                head += 1
        found: list[_Cached | None] = [None] * len(distinct)
        if head >= MIN_SHARED_PREFIX:
            _, (shared,) = self._generate_cached([list(distinct[0][:head])], [None], greedy1)
            found = [shared] * len(distinct)
        longer = [i for i, p in enumerate(distinct) if len(p) > 1]
        if longer:  # each distinct prompt but its last token, on top of the shared prefix
            _, done = self._generate_cached([list(distinct[i][:-1]) for i in longer], [found[i] for i in longer],
                                            greedy1)
            for i, c in zip(longer, done):
                found[i] = c
        cache = dict(zip(distinct, found))
        return [cache[tuple(p)] for p in prompts]

    def _generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        tok = self.tokenizer
        pad = tok.pad_token_id
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        eos = [tok.eos_token_id, *params.stop_token_ids]
        greedy = params.temperature <= 0
        was_training = self.model.training
        self.model.eval()
        gen = self.model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=params.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None,
            eos_token_id=eos,
            pad_token_id=pad,
            return_dict_in_generate=True,
            output_logits=True,
        )
        if was_training:
            self.model.train()
        seqs = gen.sequences[:, width:]
        logits = torch.stack(gen.logits, dim=1).float()  # (B, T, V), untempered
        logp = torch.log_softmax(logits, dim=-1).gather(-1, seqs.unsqueeze(-1)).squeeze(-1)
        results = []
        stop = set(eos)
        for i in range(len(prompts)):
            row = seqs[i].tolist()
            n = len(row)
            for j, t in enumerate(row):
                if t in stop:
                    n = j + 1
                    break
            results.append(self._generation(row[:n], logp[i, :n].tolist()))
        return results

    def _generation(self, token_ids: list[int], logprobs: list[float]) -> Generation:
        eos = self.tokenizer.eos_token_id
        shown = token_ids[:-1] if token_ids and token_ids[-1] == eos else token_ids
        return Generation(text=self.tokenizer.decode(shown, skip_special_tokens=False), token_ids=token_ids,
                          logprobs=logprobs)

    # -- the prefix-cached path ----------------------------------------------------------------------
    def _lookup(self, prompt: list[int]) -> _Cached | None:
        """The longest cached sequence that ``prompt`` strictly extends."""
        for n in sorted(self._cache, reverse=True):
            if n < len(prompt):
                for c in self._cache[n]:
                    if prompt[:n] == c.ids:
                        return c
        return None

    def _generate_cached(self, prompts: list[list[int]], found: list[_Cached | None], params: SamplingParams,
                         keep: bool = True) -> tuple[list[Generation], list[_Cached]]:
        """Sample responses, feeding each prompt's uncached tail on top of its cached keys/values.

        Layout of row i (left padding in both parts): ``[pad | cached c_i][pad | new m_i]``, then one column
        per generated token; the attention mask hides the pads and position ids count real tokens only, so
        each row computes what it would alone. With the lean decoder: :meth:`_generate_lean`.
        """
        if self.lean is not None:
            return self._generate_lean(prompts, found, params, keep)
        tok, device = self.tokenizer, self.device
        cached = [len(c.ids) if c is not None else 0 for c in found]
        new = [p[n:] for p, n in zip(prompts, cached)]
        b, width_c, width_n = len(prompts), max(cached), max(len(t) for t in new)
        ids = torch.full((b, width_n), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, width_c + width_n), dtype=torch.long)
        pos = torch.zeros((b, width_n), dtype=torch.long)
        for i, (c, t) in enumerate(zip(cached, new)):
            ids[i, width_n - len(t):] = torch.tensor(t, dtype=torch.long)
            mask[i, width_c - c: width_c] = 1
            mask[i, width_c + width_n - len(t):] = 1
            pos[i, width_n - len(t):] = torch.arange(c, c + len(t))
        # keys/values of every layer, preallocated for the cached part, the new tokens and the generated ones
        heads, head_dim, dtype = self._kv_shape()
        capacity = width_c + width_n + params.max_new_tokens
        layers = []
        for layer in range(len(self._layers())):
            keys = torch.zeros((b, heads, capacity, head_dim), dtype=dtype, device=device)
            values = torch.zeros_like(keys)
            for i, c in enumerate(found):
                if c is not None:
                    keys[i, :, width_c - cached[i]: width_c] = c.kv[layer][0]
                    values[i, :, width_c - cached[i]: width_c] = c.kv[layer][1]
            layers.append(_Preallocated(keys, values, width_c))
        forward = _ModelCall(self.model, mask.to(device), Cache(layers=layers))
        tokens, logps, length = self._sample(forward, ids.to(device), pos.to(device), params, check=1)
        gens, kept = [], []
        for i in range(b):
            n = length[i]
            gens.append(self._generation(tokens[i][:n], logps[i][:n]))
            if keep:
                real = forward.mask[i].nonzero()[:, 0]  # this row's tokens: cached, new, the generated ones fed back
                kept.append(_Cached(prompts[i] + tokens[i][:n - 1],
                                    [(layer.keys[i][:, real], layer.values[i][:, real]) for layer in layers]))
        return gens, kept

    def _generate_lean(self, prompts: list[list[int]], found: list[_Cached | None], params: SamplingParams,
                       keep: bool = True) -> tuple[list[Generation], list[_Cached]]:
        """:meth:`_generate_cached` through the lean decoder: the keys/values in three parts
        (:class:`~creditflow.policy.backends.lean.LeanCache`): the prefix every prompt starts with, once for the
        batch; each distinct cached prompt's rest, once for the rows that extend it (a group's first turn:
        one copy for its G rows); each row's new and generated tokens."""
        heads, head_dim, dtype = self._kv_shape()
        layout = KVLayout(len(self._layers()), heads, head_dim, dtype, self.device)
        cache = LeanCache(prompts, found, params.max_new_tokens, layout, self.tokenizer.pad_token_id)
        # an accelerator's host waits for the device at every stop check: every STOP_CHECK tokens there
        check = 1 if torch.device(self.device).type == "cpu" else STOP_CHECK
        tokens, logps, length = self._sample(cache.forward_with(self.lean), cache.ids, cache.pos, params, check)
        gens, kept = [], []
        for i in range(len(prompts)):
            n = length[i]
            gens.append(self._generation(tokens[i][:n], logps[i][:n]))
            if keep:
                kept.append(_Cached(prompts[i] + tokens[i][:n - 1], cache.sequence_kv(i)))
        return gens, kept

    def _layers(self):
        return range(self.model.config.get_text_config(decoder=True).num_hidden_layers)

    def _kv_shape(self) -> tuple[int, int, torch.dtype]:
        """Key/value heads, head size and the dtype of the loop's keys/values."""
        config = self.model.config.get_text_config(decoder=True)
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dtype = next(self.model.parameters()).dtype  # on CPU, attention runs in float32 under autocast too
        if self.autocast == "bf16" and torch.device(self.device).type != "cpu":
            dtype = torch.bfloat16
        return heads, head_dim, dtype

    def _sample(self, forward, ids, pos, params: SamplingParams, check: int):
        """:func:`_sample_loop` with the model in eval mode."""
        was_training = self.model.training
        self.model.eval()
        try:
            return _sample_loop(forward, ids, pos, params, self.tokenizer.eos_token_id, check)
        finally:
            if was_training:
                self.model.train()


class _ModelCall:
    """The transformers model call of the sampling loop: its 2-D attention mask grows by one column per fed token."""

    def __init__(self, model, mask: torch.Tensor, past: Cache):
        self.model, self.mask, self.past = model, mask, past

    def __call__(self, ids: torch.Tensor, pos: torch.Tensor, fed: torch.Tensor | None) -> torch.Tensor:
        if fed is not None:
            self.mask = torch.cat([self.mask, fed.long()[:, None]], dim=1)
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=pos, past_key_values=self.past,
                         use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].float()


def _sample_loop(forward, ids: torch.Tensor, pos: torch.Tensor, params: SamplingParams, eos: int,
                 check: int = 1) -> tuple[list[list[int]], list[list[float]], list[int]]:
    """Up to ``params.max_new_tokens`` tokens per row: ``forward(ids, pos, fed)`` gives the logits (B, V) of
    the last column (``fed``: which rows' tokens are real, None for the prompts), one draw from the torch RNG
    per token for the whole batch (:func:`_sample`), the behaviour log-prob of each drawn token. Stops when
    every row has drawn a stop token, asked every ``check`` tokens. Returns tokens, log-probs and the number
    of tokens each row generated (its stop token included)."""
    device = ids.device
    stop = torch.tensor([eos, *params.stop_token_ids], device=device)
    tokens, logps = [], []
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=device)
    length = torch.zeros(ids.shape[0], dtype=torch.long, device=device)  # tokens generated per row
    fed = None
    for step in range(params.max_new_tokens):
        logits = forward(ids, pos, fed)
        nxt = _sample(logits, params)
        tokens.append(nxt)
        logps.append(torch.log_softmax(logits, -1).gather(-1, nxt[:, None])[:, 0])
        length += (~done).long()
        done |= torch.isin(nxt, stop)
        if step == params.max_new_tokens - 1 or ((step + 1) % check == 0 and bool(done.all())):
            break
        ids, pos, fed = nxt[:, None], pos[:, -1:] + 1, ~done  # feed the sampled tokens (finished rows: masked)
    return torch.stack(tokens, 1).tolist(), torch.stack(logps, 1).tolist(), length.tolist()


def rollout_copy(model):
    """A bfloat16 copy of ``model`` for generation: its parameters cast, its buffers (the rotary frequencies)
    kept in their own dtype, no gradients."""
    out = copy.deepcopy(model).eval()
    for p in out.parameters():
        p.requires_grad_(False)
        p.grad = None
        p.data = p.data.to(torch.bfloat16)
    return out


def lean_decoder(model, decode: str, share_prefix: bool) -> LeanDecoder | None:
    """The sampling loop's lean decoder for ``policy.decode`` (``auto``: where the model is supported, sits on
    the CPU, and the loop runs, i.e. with ``share_prefix``), or None for the transformers model call. ``lean``
    on a model it cannot run raises ValueError, saying why."""
    if decode not in ("auto", "lean", "hf"):
        raise ValueError(f"decode must be auto, lean or hf, got {decode!r}")
    if decode == "hf":
        return None
    if decode == "auto":  # on an accelerator the lean path is untested here (no GPU): the transformers call there
        cpu = next(model.parameters()).device.type == "cpu"
        if not (share_prefix and cpu) or unsupported(model):
            return None
    return LeanDecoder(model)


def _full_attention_only(model) -> bool:
    """Whether every layer of ``model`` attends over the whole context (no sliding-window layers)."""
    config = model.config.get_text_config(decoder=True)
    types = getattr(config, "layer_types", None) or []
    sliding = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    return all(t == "full_attention" for t in types) and not sliding


def _sample(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """One token per row: greedy at temperature 0, else from softmax(logits / T) within the top-p nucleus."""
    if params.temperature <= 0:
        return logits.argmax(-1)
    scaled = logits / params.temperature
    if params.top_p < 1.0:  # drop the tokens outside the smallest set with mass >= top_p (keep at least one)
        sorted_logits, order = scaled.sort(-1, descending=True)
        mass_before = sorted_logits.softmax(-1).cumsum(-1) - sorted_logits.softmax(-1)
        sorted_logits = sorted_logits.masked_fill(mass_before >= params.top_p, float("-inf"))
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, order, sorted_logits)
    return torch.multinomial(scaled.softmax(-1), 1)[:, 0]
