"""LoRA adapters (PEFT) on a policy: the settings checked against the model, the wrapped policy, the
adapter-disabled reference and the merged weights a generation engine needs.

One config, ``policy.lora`` (:class:`creditflow.config.LoRAConfig`), serves every stage that trains: SFT and
DPO hand :func:`peft_config` to TRL's trainers, RL wraps the policy with :func:`wrap`. Only the adapter's
parameters require gradients, so an optimizer built over :func:`trainable_parameters` holds state for
those alone. The base weights never change: the reference policy of the KL term is the same module with the
adapter switched off (:func:`adapter_disabled`), not a second copy, and :func:`merged_weights` adds the
adapter's update to copies of the base weights rather than merging into them and back (which would move
them by float rounding every step).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import peft
import torch
from peft.tuners.lora import LoraLayer
from transformers import AutoModelForCausalLM, PretrainedConfig
from transformers.pytorch_utils import Conv1D

from creditflow.config import LoRAConfig
from creditflow.errors import UserError
from creditflow.policy.load import others_deprecations_hidden

# layer types PEFT's LoRA can wrap (peft.tuners.lora.model.LoraModel._create_new_module)
_WRAPPABLE = (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, Conv1D)


def peft_config(settings: LoRAConfig) -> peft.LoraConfig:
    """``policy.lora`` as PEFT's config (TRL's ``peft_config``)."""
    return peft.LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                           target_modules=settings.target_modules, task_type="CAUSAL_LM")


def check_targets(settings: LoRAConfig, model_config: PretrainedConfig) -> None:
    """Every name in ``target_modules`` names a layer PEFT can wrap in the model ``model_config`` describes; a
    one-line UserError naming the first that does not. The model is built on the meta device (no memory, no
    weights read), so this runs before any work."""
    if settings.target_modules == "all-linear":
        return
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(model_config)
    except (ValueError, KeyError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"policy.lora.target_modules: cannot build the model to check them ({first})") from None
    modules = dict(model.named_modules())
    layers = sorted({name.rsplit(".", 1)[-1] for name, m in modules.items() if isinstance(m, _WRAPPABLE)})
    for target in settings.target_modules:
        found = [m for name, m in modules.items() if name == target or name.endswith("." + target)]
        if not found:
            raise UserError(f"policy.lora.target_modules: no module {target!r} in the model "
                            f"(its layers: {', '.join(layers)})")
        if not all(isinstance(m, _WRAPPABLE) for m in found):
            kind = next(type(m).__name__ for m in found if not isinstance(m, _WRAPPABLE))
            raise UserError(f"policy.lora.target_modules: {target!r} is a {kind}, not a layer LoRA can wrap "
                            f"(its layers: {', '.join(layers)})")


def wrap(model, settings: LoRAConfig, base_dir: str | Path) -> peft.PeftModel:
    """``model`` with a fresh adapter on ``settings.target_modules``. PEFT initialises B = 0, so the wrapped
    model computes exactly what ``model`` did. ``base_dir`` (the directory ``model`` was loaded from) goes
    into the adapter's ``adapter_config.json`` as an absolute path: a saved adapter names its base model."""
    with others_deprecations_hidden():
        wrapped = peft.get_peft_model(model, peft_config(settings))
    wrapped.peft_config[wrapped.active_adapter].base_model_name_or_path = str(Path(base_dir).resolve())
    return wrapped


def load_adapter(model, adapter_dir: str | Path) -> peft.PeftModel:
    """``model`` (the base) with the trainable adapter saved in ``adapter_dir``: resuming a LoRA run."""
    with others_deprecations_hidden():
        return peft.PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)


def is_lora(model) -> bool:
    return isinstance(model, peft.PeftModel)


def trainable_parameters(model) -> list[torch.nn.Parameter]:
    """The parameters an optimizer should hold: all of a plain model's, only the adapter's of a LoRA one."""
    return [p for p in model.parameters() if p.requires_grad]


@contextmanager
def adapter_disabled(model) -> Iterator:
    """``model`` with its adapter switched off, in eval mode: the base policy, i.e. the reference RL and DPO
    measure against, without a second copy of the weights. Mode and adapter are restored afterwards."""
    training = model.training
    model.eval()
    try:
        with model.disable_adapter():
            yield model
    finally:
        model.train(training)


@torch.no_grad()
def merged_weights(model: peft.PeftModel) -> Iterator[tuple[str, torch.Tensor]]:
    """The state dict a plain model with the adapter merged in would have (HF names, ``W + alpha/r * B A``
    for every adapted layer), computed in new tensors: the base weights stay bit-identical."""
    inner = model.get_base_model()  # the HF model, its adapted layers replaced by LoRA layers
    adapter = model.active_adapter
    deltas = {f"{name}.base_layer.weight": module.get_delta_weight(adapter)
              for name, module in inner.named_modules() if isinstance(module, LoraLayer)}
    for key, tensor in inner.state_dict().items():
        if ".lora_" in key:  # the adapter's own matrices (lora_A, lora_B, ...)
            continue
        merged = tensor + deltas[key] if key in deltas else tensor.detach()
        yield key.replace(".base_layer.", "."), merged
