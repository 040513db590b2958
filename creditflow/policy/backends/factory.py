"""The generation backend the ``policy`` section names (``policy.backend``), built and closed here, with its
checks, the sampling settings of training and evaluation (``generation``), and the chat-template encoder of
token-id prompts."""

from __future__ import annotations

import os
from pathlib import Path

from creditflow.config import GenerationConfig, PolicyConfig
from creditflow.errors import UserError
from creditflow.policy.backends import openai as openai_backend
from creditflow.policy.backends import vllm as vllm_backend
from creditflow.policy.backends.base import Backend, SamplingParams
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.validate import weights_dir


def check_backend(p: PolicyConfig, trains: bool = False) -> None:
    """``policy.backend`` usable as set, checked before any work: ``openai`` serves a fixed policy (not for
    a run that ``trains``) and needs ``policy.base_url`` and ``policy.model_name``; ``vllm`` and ``openai``
    need their optional package."""
    if p.backend == "openai":
        if trains:
            raise UserError("policy.backend=openai serves fixed policies (eval, rro collect); RL training needs a "
                            "backend that follows the weights: hf or vllm")
        if not p.base_url or not p.model_name:
            raise UserError("policy.backend=openai needs policy.base_url and policy.model_name "
                            "(--base-url, --model-name)")
        openai_backend.check_installed()
    elif p.backend == "vllm":
        vllm_backend.check_installed()


def chat_encoder(tokenizer):
    """messages -> prompt ids via the chat template (with the assistant generation prompt)."""
    def encode(messages: list[dict]) -> list[int]:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return list(ids)
    return encode


def sampling_params(generation: GenerationConfig, tokenizer, evaluation: bool = False) -> SamplingParams:
    """The run's sampling (``generation``): ``evaluation`` at ``eval_temperature`` with no top-p cut; a stop at
    ``</action>`` when the tokenizer has it as one token (``generation.stop_at_action_close``)."""
    stops = []
    if generation.stop_at_action_close:
        close = tokenizer.convert_tokens_to_ids("</action>")
        if isinstance(close, int) and close != tokenizer.unk_token_id and close is not None:
            stops.append(close)
    return SamplingParams(
        max_new_tokens=generation.max_new_tokens,
        temperature=generation.eval_temperature if evaluation else generation.temperature,
        top_p=1.0 if evaluation else generation.top_p,
        stop_token_ids=stops,
    )


def hf_backend(p: PolicyConfig, model, tokenizer) -> HFBackend:
    """The ``hf`` backend on ``model`` with the run's ``policy.autocast``, ``share_prefix``, ``decode`` and
    ``rollout_dtype``; ``decode=lean`` on a model the lean decoder cannot run is a one-line error saying why."""
    try:
        return HFBackend(model, tokenizer, autocast=p.autocast, share_prefix=p.share_prefix, decode=p.decode,
                         rollout_dtype=p.rollout_dtype)
    except ValueError as err:
        raise UserError(f"policy.decode=lean: {err}") from None


def make_backend(p: PolicyConfig, seed: int, model, tokenizer, model_path: str | Path | None = None) -> Backend:
    """The generation backend of ``policy.backend`` (``p``); ``seed``: the run's (vLLM's sampling).

    ``hf`` generates with ``model``. ``vllm`` starts a colocated engine from ``model_path`` (the directory
    ``model`` was loaded from; for a LoRA adapter, its base model) and pushes ``model``'s weights into it (a
    LoRA policy's merged), so it starts in step with the trainer.
    ``openai`` talks to ``policy.base_url``; ``model`` is not used (it may be None).
    """
    check_backend(p)
    if p.backend == "hf":
        return hf_backend(p, model, tokenizer)
    if p.backend == "openai":
        return openai_backend.OpenAIBackend(p.base_url, p.model_name, tokenizer,
                                            api_key=os.environ.get("OPENAI_API_KEY"), timeout=p.request_timeout,
                                            retries=p.request_retries)
    if model_path is None:
        raise UserError("policy.backend=vllm needs the policy's model directory")
    backend = vllm_backend.VLLMBackend(str(weights_dir(model_path)), tokenizer, device=p.device,
                                       dtype="bfloat16" if p.autocast == "bf16" else p.dtype,
                                       seed=seed, max_model_len=p.vllm_max_model_len,
                                       kv_cache_gib=p.vllm_kv_cache_gib,
                                       gpu_memory_utilization=p.vllm_gpu_memory_utilization)
    if model is not None:
        backend.sync_weights(model)
    return backend


def close_backend(backend: Backend) -> None:
    """Shut down a backend that holds an engine (vLLM); a no-op for the others."""
    close = getattr(backend, "close", None)
    if close is not None:
        close()
