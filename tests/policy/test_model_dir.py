"""Model directories are checked before any work (issue 63, class 3): tokenizer present and loadable, weights
readable, config consistent with the weights; each failure is one line naming the file."""

from __future__ import annotations

import json
import shutil

import pytest

from creditflow.errors import UserError
from creditflow.policy.validate import check_model_dir, safetensors_header


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    out = tmp_path / "model"
    shutil.copytree(tiny_model_dir, out)
    return out


def _fails(path, *parts, weights=True):
    with pytest.raises(UserError) as exc:
        check_model_dir(path, weights=weights)
    message = str(exc.value)
    assert "\n" not in message and all(p in message for p in parts), message
    return message


def test_the_tiny_model_passes(tiny_model_dir):
    assert check_model_dir(tiny_model_dir) == tiny_model_dir
    shapes = safetensors_header(tiny_model_dir / "model.safetensors")
    assert shapes["model.embed_tokens.weight"][1] == 32


def _truncate(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep(len(data))])


@pytest.mark.parametrize("damage, parts", [
    (lambda d: (d / "tokenizer.json").unlink() or (d / "tokenizer_config.json").unlink(), ["no tokenizer"]),
    (lambda d: (d / "tokenizer.json").write_text("{broken"), ["tokenizer.json:1: invalid JSON"]),
    (lambda d: (d / "tokenizer.json").write_text('{"model": 3}'), ["the tokenizer does not load"]),
    (lambda d: (d / "model.safetensors").unlink(), ["no weights (none of model.safetensors"]),
    (lambda d: _truncate(d / "model.safetensors", lambda n: n - 100), ["model.safetensors: has "]),
    (lambda d: _truncate(d / "model.safetensors", lambda n: 5), ["model.safetensors: not a safetensors file"]),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"),
     ["model.safetensors: not a safetensors file"]),
    (lambda d: _set_config(d, hidden_size=64), ["model.safetensors: tensor", "has shape", "config.json describes"]),
    (lambda d: _set_config(d, num_hidden_layers=3, layer_types=["full_attention"] * 3), ["model.safetensors:", "tensors config.json describes are missing",
                                                      "model.layers.2."]),
    (lambda d: _set_config(d, vocab_size=100), ["config.json: vocab_size is 100 but the tokenizer has"]),
    (lambda d: (d / "generation_config.json").write_text("[1]"), ["generation_config.json: expected a JSON object"]),
    (lambda d: _set_config(d, num_hidden_layers=3), ["config.json: cannot load the model config"]),
])
def test_a_broken_model_directory_is_one_line_naming_the_file(damage, parts, model_copy):
    damage(model_copy)
    _fails(model_copy, *parts)


def _set_config(d, **changes):
    config = json.loads((d / "config.json").read_text())
    config.update(changes)
    (d / "config.json").write_text(json.dumps(config))


def test_sharded_weights_name_the_missing_shard(model_copy):
    (model_copy / "model.safetensors").rename(model_copy / "model-00001-of-00002.safetensors")
    (model_copy / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}))
    _fails(model_copy, "model-00002-of-00002.safetensors: missing")


def test_a_truncated_pytorch_bin_is_named(model_copy):
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(model_copy / "model.safetensors"), model_copy / "pytorch_model.bin")
    (model_copy / "model.safetensors").unlink()
    check_model_dir(model_copy)
    _truncate(model_copy / "pytorch_model.bin", lambda n: n // 2)
    _fails(model_copy, "pytorch_model.bin: truncated or damaged")


def test_a_served_model_copy_needs_no_weights(model_copy):
    (model_copy / "model.safetensors").unlink()
    assert check_model_dir(model_copy, weights=False) == model_copy
    _fails(model_copy, "no weights")


def test_a_lora_adapter_needs_readable_adapter_weights(model_copy, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(model_copy)}))
    _fails(adapter, "LoRA adapter without weights")
    (adapter / "adapter_model.safetensors").write_bytes(b"\x01")
    _fails(adapter, "adapter_model.safetensors: not a safetensors file")
    (model_copy / "tokenizer.json").write_text("{")
    (adapter / "adapter_model.safetensors").unlink()
    _fails(adapter, "its base model:", "tokenizer.json:1: invalid JSON")


def test_a_repaired_directory_is_checked_again(model_copy):
    good = (model_copy / "tokenizer.json").read_bytes()
    check_model_dir(model_copy)
    (model_copy / "tokenizer.json").write_text("{")
    _fails(model_copy, "invalid JSON")
    (model_copy / "tokenizer.json").write_bytes(good)
    check_model_dir(model_copy)
