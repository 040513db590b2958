"""Batched generation with a transformers model: one ``generate`` call per turn, left padding.

Behaviour log-probs are taken from the raw (untempered) logits of each sampled token, i.e.
log pi_old(a|s) of the policy itself, which is what the PPO ratio needs.
"""

from __future__ import annotations

import torch

from creditflow.policy.backends.base import Generation, SamplingParams


class HFBackend:
    def __init__(self, model, tokenizer, max_batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size

    def sync_weights(self, model) -> None:
        """Nothing to push: this backend generates with the trained module itself."""

    @property
    def device(self):
        return next(self.model.parameters()).device

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            out.extend(self._generate(prompts[start:start + self.max_batch_size], params))
        return out

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
            token_ids = row[:n]
            shown = token_ids[:-1] if token_ids and token_ids[-1] == tok.eos_token_id else token_ids
            results.append(Generation(
                text=tok.decode(shown, skip_special_tokens=False),
                token_ids=token_ids,
                logprobs=logp[i, :n].tolist(),
            ))
        return results
