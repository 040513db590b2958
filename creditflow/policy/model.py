"""Deprecated: what was ``creditflow.policy.model`` now lives in three modules by concern. Importing this module
warns (``DeprecationWarning``); it goes in the next release.

- :mod:`creditflow.policy.load`: loading a policy and its tokenizer (``load_policy``, ``load_tokenizer``,
  ``count_parameters``), the device, dtype and autocast settings (``resolve_device``, ``resolve_dtype``,
  ``check_device_and_dtype``, ``cpu_has_native_bf16``, ``autocast_note``, ``mixed_precision``), the
  float32-attention-on-CPU patch (``CPU_FLOAT32_SDPA``, ``float32_attention_on_cpu``) and the warnings of other
  packages creditflow hides (``DEPRECATIONS_OF_OTHERS``, ``others_deprecations_hidden``).
- :mod:`creditflow.policy.validate`: the model-directory checks before any work (``check_model_dir``,
  ``safetensors_header``, ``TOKENIZER_FILES``, ``JSON_FILES``, ``WEIGHT_FILES``), LoRA adapter directories
  (``ADAPTER_CONFIG``, ``is_adapter_dir``, ``adapter_base``, ``weights_dir``) and ``model_config``.
- :mod:`creditflow.policy.tiny`: the built-in tiny default (``SPECIAL_TOKENS``, ``CHAT_TEMPLATE``,
  ``TINY_DEFAULTS``, ``tiny_config``, ``train_tokenizer``, ``TINY_RECORD``, ``tiny_model_built``,
  ``build_tiny_policy``).

Import from those modules; this one keeps the old import path working for one release, the very same objects.
"""

from __future__ import annotations

import warnings

from creditflow.policy.load import (CPU_FLOAT32_SDPA, DEPRECATIONS_OF_OTHERS, autocast_note, check_device_and_dtype,
                                    count_parameters, cpu_has_native_bf16, float32_attention_on_cpu, load_policy,
                                    load_tokenizer, mixed_precision, others_deprecations_hidden, resolve_device,
                                    resolve_dtype)
from creditflow.policy.tiny import (CHAT_TEMPLATE, SPECIAL_TOKENS, TINY_DEFAULTS, TINY_RECORD, build_tiny_policy,
                                    tiny_config, tiny_model_built, train_tokenizer)
from creditflow.policy.validate import (ADAPTER_CONFIG, JSON_FILES, TOKENIZER_FILES, WEIGHT_FILES, adapter_base,
                                        check_model_dir, is_adapter_dir, model_config, safetensors_header,
                                        weights_dir)

warnings.warn("creditflow.policy.model is split into creditflow.policy.load, .validate and .tiny; import from "
              "those (the old path goes in the next release)", DeprecationWarning, stacklevel=2)

__all__ = [
    "ADAPTER_CONFIG", "CHAT_TEMPLATE", "CPU_FLOAT32_SDPA", "DEPRECATIONS_OF_OTHERS", "JSON_FILES", "SPECIAL_TOKENS",
    "TINY_DEFAULTS", "TINY_RECORD", "TOKENIZER_FILES", "WEIGHT_FILES", "adapter_base", "autocast_note",
    "build_tiny_policy", "check_device_and_dtype", "check_model_dir", "count_parameters", "cpu_has_native_bf16",
    "float32_attention_on_cpu", "is_adapter_dir", "load_policy", "load_tokenizer", "mixed_precision", "model_config",
    "others_deprecations_hidden", "resolve_device", "resolve_dtype", "safetensors_header", "tiny_config",
    "tiny_model_built", "train_tokenizer", "weights_dir",
]
