"""``creditflow.policy.model`` was split by concern into ``load``, ``validate`` and ``tiny``; the old import path
keeps every public name for one release, as the very objects of their new homes, and warns on import."""

import subprocess
import sys
import warnings

from creditflow.policy import load, tiny, validate

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from creditflow.policy import model


def test_importing_the_old_path_warns():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    import creditflow.policy.model\nexcept DeprecationWarning as e:\n    print('warned:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warned: creditflow.policy.model is split into creditflow.policy.load" in proc.stdout


def test_every_name_of_the_old_module_is_the_new_modules_object():
    homes = (load, validate, tiny)
    for name in model.__all__:
        home = [m for m in homes if name in vars(m)]
        assert home, f"{name} has no home"
        assert getattr(model, name) is getattr(home[0], name)


def test_the_old_public_names_are_all_there():
    old = {"ADAPTER_CONFIG", "CHAT_TEMPLATE", "CPU_FLOAT32_SDPA", "DEPRECATIONS_OF_OTHERS", "JSON_FILES",
           "SPECIAL_TOKENS", "TINY_DEFAULTS", "TINY_RECORD", "TOKENIZER_FILES", "WEIGHT_FILES", "adapter_base",
           "autocast_note", "build_tiny_policy", "check_device_and_dtype", "check_model_dir", "count_parameters",
           "cpu_has_native_bf16", "float32_attention_on_cpu", "is_adapter_dir", "load_policy", "load_tokenizer",
           "mixed_precision", "model_config", "others_deprecations_hidden", "resolve_device", "resolve_dtype",
           "safetensors_header", "tiny_config", "tiny_model_built", "train_tokenizer", "weights_dir"}
    assert old <= set(model.__all__)
    assert all(hasattr(model, name) for name in old)
