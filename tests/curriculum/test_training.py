"""Short training runs through run_train: crps / expreplay / none smoke runs, resume equivalence, CLI."""

import json

import pytest

from creditflow.config import build_config
from creditflow.curriculum.hooks import METRIC_KEYS
from creditflow.trainer.metrics import read_metrics
from creditflow.recipes.resolve import config_for_resume
from creditflow.recipes.train import run_train

SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=0",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "tensorboard=false",
         "curriculum.warm_start_demos=4"]


def run(tmp_path, name, steps, extra=(), model=None):
    cfg = build_config(None, [f"out_dir={tmp_path / name}", f"policy.model={model}", f"rl.steps={steps}",
                              *SMALL, *extra])
    return run_train(cfg, log=lambda *_: None)


def strip_times(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.parametrize("name", ["crps", "expreplay", "none"])
def test_smoke_run_logs_curriculum_metrics(tmp_path, tiny_model_dir, name):
    extra = [f"curriculum.name={name}", "curriculum.p_replay=1.0"]
    out, trainer, _ = run(tmp_path, name, 2 if name != "none" else 1, extra, model=tiny_model_dir)
    rows = read_metrics(out / "metrics.jsonl")
    for row in rows[1:]:
        for key in METRIC_KEYS:
            assert key in row, key
    hooks = trainer.hooks
    if name == "none":
        assert rows[1]["crps/buffer_size"] == 0 and rows[1]["crps/replay_share"] == 0
        return
    assert all(r["crps/replay_share"] == 1.0 for r in rows[1:])  # warm-started buffer, p_replay = 1
    assert sum(e.replays for e in hooks.buffer.entries.values()) + hooks.buffer.counts["mastered"] > 0
    assert rows[-1]["train/episodes"] == 4 and rows[-1]["crps/restore_mismatches"] == 0
    if name == "expreplay":
        assert all(e.k == e.T for e in hooks.buffer.entries.values())


def test_resume_with_crps_continues_exactly(tmp_path, tiny_model_dir):
    extra = ["curriculum.name=crps", "curriculum.p_replay=0.5", "rl.save_every=1", "rollout.group_size=3",
             "rl.eval_every=1"]
    full_out, full_trainer, _ = run(tmp_path, "full", 3, extra, model=tiny_model_dir)
    part_out, _, _ = run(tmp_path, "part", 1, extra, model=tiny_model_dir)
    with (part_out / "metrics.jsonl").open("a") as fh:  # crash after step 2 was logged, before its checkpoint
        fh.write(json.dumps({"step": 2, "bogus": 1}) + "\n")
    cfg = config_for_resume(part_out, ["rl.steps=3"])
    _, part_trainer, _ = run_train(cfg, resume=True, log=lambda *_: None)
    full = strip_times(read_metrics(full_out / "metrics.jsonl"))
    part = strip_times(read_metrics(part_out / "metrics.jsonl"))
    assert [r["step"] for r in part] == [0, 1, 2, 3]
    assert any(r["crps/replay_share"] > 0 for r in full[2:])  # replay happened after the resume point
    assert part == full
    assert part_trainer.hooks.state_dict() == full_trainer.hooks.state_dict()


def test_cli_curriculum_option(tmp_path, capsys):
    from creditflow.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--curriculum", "magic", f"out_dir={tmp_path / 'run'}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "curriculum.name" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()
