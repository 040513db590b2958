"""RRO preference files and DPO settings are checked before the model loads, with ``file:line`` (issue 63)."""

from __future__ import annotations

import json

import pytest

from creditflow.errors import UserError
from creditflow.pairs.preferences import read_preferences

CONVERSATIONAL = {"prompt": [{"role": "system", "content": "You play."}, {"role": "user", "content": "state"}],
                  "chosen": [{"role": "assistant", "content": "<action>up</action>"}],
                  "rejected": [{"role": "assistant", "content": "<action>down</action>"}],
                  "task_id": "sokoban/1", "step": 1, "chosen_valid": True}
STANDARD = {"prompt": "state", "chosen": "<action>up</action>", "rejected": "<action>down</action>"}


def write(tmp_path, *rows) -> str:
    path = tmp_path / "preferences.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def test_both_trl_formats_read(tmp_path):
    assert len(read_preferences(write(tmp_path, CONVERSATIONAL, CONVERSATIONAL))) == 2
    assert len(read_preferences(write(tmp_path, STANDARD, "", STANDARD))) == 2  # a blank line is skipped


def test_a_line_separator_inside_a_response_is_no_line_break(tmp_path):
    row = {**STANDARD, "chosen": "up\u2028down"}  # json.dumps(ensure_ascii=False) writes U+2028 as it is
    assert read_preferences(write(tmp_path, row))[0]["chosen"] == "up\u2028down"


def _with(**changes):
    return {**CONVERSATIONAL, **changes}


@pytest.mark.parametrize("row, needle", [
    ("[1, 2]", "expected a JSON object, got list"),
    ("{not json", "invalid JSON"),
    ({"prompt": "x", "chosen": "y"}, "missing rejected"),
    (_with(prompt=""), "prompt is empty"),
    (_with(prompt=[]), "prompt must be text or a non-empty list of messages, got an empty list"),
    (_with(chosen=None), "chosen must be text or a non-empty list of messages, got NoneType"),
    (_with(chosen=["up"]), "chosen[0] must be a message object, got str"),
    (_with(rejected=[{"role": "bot", "content": "x"}]), "rejected[0]: role must be one of system, user, assistant"),
    (_with(rejected=[{"role": "assistant", "content": 5}]), "rejected[0]: content must be text, got int"),
    (_with(chosen=[{"role": "user", "content": "x"}]), "chosen must end with an assistant message"),
    (_with(chosen="up"), "prompt is a list of messages but chosen is text; a pair is all text or all messages"),
    (_with(chosen_valid="false"), "chosen_valid must be true or false, got 'false'"),
    (_with(step=1.5), "step must be an integer, got 1.5"),
    (_with(step=True), "step must be an integer, got True"),
    (_with(task_id=7), "task_id must be a string, got 7"),
])
def test_a_bad_pair_is_one_line_naming_file_and_line(row, needle, tmp_path):
    path = write(tmp_path, CONVERSATIONAL, row)
    with pytest.raises(UserError) as exc:
        read_preferences(path)
    assert str(exc.value).startswith(f"{path}:2: ") and needle in str(exc.value), str(exc.value)


def test_every_pair_has_the_first_pairs_format(tmp_path):
    path = write(tmp_path, CONVERSATIONAL, STANDARD)
    with pytest.raises(UserError, match=rf"^{path}:2: a pair of text, but {path}:1 holds a list of messages"):
        read_preferences(path)


@pytest.mark.parametrize("rows, needle", [
    ([], "no preference pairs to train DPO on"),
    ([CONVERSATIONAL, _with(rejected=[])], "preferences.jsonl:2: rejected must be text"),
])
def test_rro_train_refuses_bad_data_before_the_model_loads(rows, needle, tmp_path, tiny_model_dir, capsys,
                                                           monkeypatch):
    import creditflow.recipes.rro as rro
    from creditflow.cli import main

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(rro, "load_policy", no_load)
    data = tmp_path / "data"
    data.mkdir()
    write(data, *rows)
    with pytest.raises(SystemExit) as exc:
        main(["rro", "train", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "run").exists()


def test_every_dpo_scheduler_the_config_offers_runs_in_transformers():
    """``rro.dpo.scheduler`` offers the schedulers transformers builds from a warmup and a step count alone."""
    import torch
    from transformers import get_scheduler

    from creditflow.config import RRODPOConfig

    options = RRODPOConfig.model_fields["scheduler"].annotation.__args__
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    for name in options:
        get_scheduler(name, optimizer, num_warmup_steps=1, num_training_steps=10)
    assert "constant_with_warmup" in options and "cosine_with_min_lr" not in options
