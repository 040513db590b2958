"""Preference JSONL -> datasets -> a few DPO steps (TRL) on the tiny model; the CLI ``rro train``."""

import json

import pytest

from creditflow.pairs.collect import PreferenceCollector
from creditflow.pairs.preferences import PreferenceWriter, read_preferences
from tests.pairs.helpers import SOKOBAN, RandomPolicyBackend, engine


@pytest.fixture(scope="module")
def pref_dir(tmp_path_factory):
    """Fixed-size (N=4) pairs on Sokoban from a scripted random policy (prompts are the engine's)."""
    d = tmp_path_factory.mktemp("prefs")
    c = PreferenceCollector(engine(RandomPolicyBackend(), SOKOBAN), exploration="fixed", candidates=4,
                            mc_rollouts=4, seed=1, env_name="sokoban")
    summary = c.collect([300_000 + i for i in range(8)], PreferenceWriter(d, {"exploration": "fixed"}))
    assert summary["samples_per_step"] == 4.0 and summary["pairs"] >= 4
    return d


def test_preference_jsonl_loads_with_datasets(pref_dir, tmp_path):
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(pref_dir / "preferences.jsonl"), split="train",
                      cache_dir=str(tmp_path / "hf"))
    row = ds[0]
    assert row["prompt"][0]["role"] == "user" and "Sokoban" not in row["chosen"][0]["content"]
    assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
    assert row["chosen_reward"] > row["rejected_reward"]
    assert len(ds) == len(read_preferences(pref_dir))


def test_dpo_trains_a_few_steps_from_pi_sft(pref_dir, tiny_model_dir, tmp_path):
    import torch

    from creditflow.config import LoRAConfig, RRODPOConfig
    from creditflow.policy.load import load_policy
    from creditflow.trainer.dpo import train_dpo
    from creditflow.trainer.trl_runner import TRLOptions

    model, tok = load_policy(tiny_model_dir, "cpu", "float32")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    pairs = read_preferences(pref_dir)[:4]
    trained, metrics = train_dpo(model, tok, pairs, RRODPOConfig(epochs=2, lr=1e-2, batch_size=2, max_length=512),
                                 TRLOptions(tmp_path))
    assert metrics["dpo/steps"] == 4 and torch.isfinite(torch.tensor(metrics["dpo/train_loss"]))
    assert metrics["dpo/history"] and "dpo/margins" in metrics["dpo/history"][-1]
    # the implicit rewards' means over the last epoch: its 2 steps of 4
    rows = [h for h in metrics["dpo/history"] if "dpo/chosen" in h]
    assert len(rows) == 4
    for side in ("chosen", "rejected"):
        last_epoch = (rows[2][f"dpo/{side}"] + rows[3][f"dpo/{side}"]) / 2
        assert metrics[f"dpo/last_epoch_{side}"] == pytest.approx(last_epoch)
    after = trained.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)

    model, tok = load_policy(tiny_model_dir, "cpu", "float32")
    trained, metrics = train_dpo(model, tok, pairs[:2], RRODPOConfig(epochs=1, lr=1e-2, batch_size=2, max_length=512),
                                 TRLOptions(tmp_path, lora=LoRAConfig(enabled=True, r=4, alpha=8)))
    assert metrics["dpo/steps"] == 1
    assert not hasattr(trained, "peft_config")  # adapter merged: a plain model again
    assert set(trained.state_dict()) == set(before)


def test_dpo_sft_weight_adds_the_chosen_nll_linearly(pref_dir, tiny_model_dir, tmp_path):
    """rro.dpo.sft_weight = w: the first step's loss is DPO's ln 2 (policy = reference) plus w x the chosen
    response's NLL, so w = 2 adds twice what w = 1 adds, and w = 0 is plain DPO."""
    import math

    from creditflow.config import RRODPOConfig
    from creditflow.policy.load import load_policy
    from creditflow.trainer.dpo import train_dpo
    from creditflow.trainer.trl_runner import TRLOptions

    pairs = read_preferences(pref_dir)[:2]
    losses = {}
    for w in (0.0, 1.0, 2.0):
        model, tok = load_policy(tiny_model_dir, "cpu", "float32")
        _, metrics = train_dpo(model, tok, pairs, RRODPOConfig(
            epochs=1, lr=1e-6, batch_size=2, max_length=512, warmup=0, sft_weight=w), TRLOptions(tmp_path / str(w)))
        assert metrics["dpo/steps"] == 1
        losses[w] = metrics["dpo/train_loss"]
    assert losses[0.0] == pytest.approx(math.log(2), abs=1e-4)
    nll = losses[1.0] - losses[0.0]
    assert nll > 0.1 and losses[2.0] - losses[0.0] == pytest.approx(2 * nll, rel=1e-3)


def test_cli_rro_train_saves_pi_dpo(pref_dir, tiny_model_dir, tmp_path, capsys):
    from creditflow.cli import main
    from creditflow.policy.load import load_policy

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["rro", "train", "--model", str(tiny_model_dir), "--data", str(pref_dir), "--out", str(out),
              "rro.dpo.epochs=1", "rro.dpo.batch_size=8", "rro.dpo.lr=1e-3", "policy.device=cpu"])
    assert exc.value.code in (0, None)
    load_policy(out / "dpo_model", "cpu")
    metrics = json.loads((out / "dpo_metrics.json").read_text())
    assert metrics["dpo/reference"] == str(tiny_model_dir) and metrics["dpo/pairs"] >= 4


def test_chosen_valid_reads_the_column_or_else_the_explored_trajectory(pref_dir, tmp_path):
    """Pairs written before the chosen_valid column existed get it from the explored trajectory's step (the
    trajectory goes on with the chosen action); without the trajectories that is a one-line user error."""
    import shutil

    from creditflow.errors import UserError
    from creditflow.pairs.preferences import chosen_valid

    pairs = read_preferences(pref_dir)
    truth = [p["chosen_valid"] for p in pairs]
    assert True in truth and False in truth  # the random policy's invalid answers are chosen sometimes
    old = tmp_path / "old"
    shutil.copytree(pref_dir, old)
    bare = [{k: v for k, v in p.items() if k != "chosen_valid"} for p in pairs]
    assert chosen_valid(old, bare) == truth
    (old / "trajectories.jsonl").unlink()
    with pytest.raises(UserError, match="trajectories.jsonl: not found"):
        chosen_valid(old, bare)


def test_cli_rro_train_valid_chosen_drops_the_pairs_that_choose_an_invalid_action(pref_dir, tiny_model_dir, tmp_path,
                                                                                   capsys):
    """rro.dpo.pairs=valid_chosen trains on the pairs whose chosen action is valid and counts the others; a
    collection whose every pair chooses an invalid action is a one-line error, not an empty DPO."""
    from creditflow.cli import main

    pairs = read_preferences(pref_dir)
    invalid = sum(not p["chosen_valid"] for p in pairs)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["rro", "train", "--model", str(tiny_model_dir), "--data", str(pref_dir), "--out", str(out),
              "rro.dpo.pairs=valid_chosen", "rro.dpo.epochs=1", "rro.dpo.batch_size=8", "policy.device=cpu"])
    assert exc.value.code in (0, None)
    metrics = json.loads((out / "dpo_metrics.json").read_text())
    assert (metrics["dpo/pairs"], metrics["dpo/pairs_dropped"]) == (len(pairs) - invalid, invalid)
    assert f"({invalid} of {len(pairs)} dropped: invalid chosen action)" in capsys.readouterr().err

    only_invalid = tmp_path / "only_invalid"
    only_invalid.mkdir()
    (only_invalid / "preferences.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in pairs if not p["chosen_valid"]))
    with pytest.raises(SystemExit) as exc:
        main(["rro", "train", "--model", str(tiny_model_dir), "--data", str(only_invalid), "--out",
              str(tmp_path / "run2"), "rro.dpo.pairs=valid_chosen", "policy.device=cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and f"all {invalid} pairs" in err[0]
    assert not (tmp_path / "run2" / "dpo_model").exists()


def test_cli_rro_user_errors_are_one_line(tmp_path, capsys):
    from creditflow.cli import main

    for argv, needle in ((["rro", "train", "--data", str(tmp_path / "none"), "--out", str(tmp_path)], "no preference data"),
                         (["rro", "collect", "rro.candidates=0"], "rro.candidates"),
                         (["rro", "run", "--executor", "spark"], "rro.executor")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]


def test_cli_rro_collect_writes_data_and_summary_and_resumes(tiny_model_dir, tmp_path, capsys):
    from creditflow.cli import main

    argv = ["rro", "collect", "--model", str(tiny_model_dir), "--out", str(tmp_path / "run"), "--tasks", "1",
            "--exploration", "fixed", "--candidates", "2", "--mc-rollouts", "1", "generation.max_new_tokens=6",
            "env.kwargs.max_steps=3", "policy.device=cpu", "tensorboard=false"]
    for _ in range(2):  # the second run finds the task finished and only rewrites the summary
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code in (0, None)
        printed = json.loads(capsys.readouterr().out)
        assert printed["samples_per_step"] == 2.0 and printed["steps"] >= 1
    data = tmp_path / "run" / "preferences"
    summary = json.loads((data / "summary.json").read_text())
    assert summary["settings"]["exploration"] == "fixed" and summary["tasks"] == 1
    assert (data / "preferences.jsonl").exists() and len((data / "tasks.jsonl").read_text().splitlines()) == 1
