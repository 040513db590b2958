"""Issue 74 part 1: the prompt layout a policy was trained with travels with the model, and every command that
loads the model uses it (an explicit setting that differs wins, with one line)."""

import json

import pytest

from creditflow import api
from creditflow.cli import main
from creditflow.config import RunConfig, build_config, given_settings
from creditflow.errors import UserError
from creditflow.policy import inference
from creditflow.recipes.resolve import with_model_settings
from creditflow.rollout import factory as rollout_factory
from creditflow.recipes.eval import evaluate_saved_policy
from creditflow.recipes.export import export_policy
from creditflow.recipes.train import run_train

SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=0",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "tensorboard=false"]


def test_the_model_settings_apply_unless_given(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    inference.save(model, settings={"policy.template": "compact", "rollout.history_length": 4, "other.key": 1})
    notes = []
    cfg = with_model_settings(build_config(None, []), model, notes.append)
    assert (cfg.policy.template, cfg.rollout.history_length, cfg.rollout.history) == ("compact", 4, "window")
    assert notes == [] and "template" not in cfg.policy.model_fields_set
    given = with_model_settings(build_config(None, ["policy.template=paper"]), model, notes.append)
    assert given.policy.template == "paper" and given.rollout.history_length == 4
    assert len(notes) == 1 and "policy.template=paper as given" in notes[0] and "policy.template=compact" in notes[0]
    plain = tmp_path / "plain"  # a model from elsewhere: nothing to apply
    plain.mkdir()
    assert with_model_settings(build_config(None, []), plain, notes.append).policy.template == "paper"
    (model / inference.FILE).write_text("[1, 2]")
    with pytest.raises(UserError, match="not a creditflow inference file"):
        with_model_settings(build_config(None, []), model)


def test_a_config_rebuilt_from_its_given_settings_keeps_the_rest_default():
    cfg = build_config(None, ["env.name=sokoban", "policy.template=compact", "rl.lr=0.001"])
    assert given_settings(cfg) == {"env": {"name": "sokoban"}, "policy": {"template": "compact"}, "rl": {"lr": 0.001}}
    again = api.load_config(cfg, ["rollout.group_size=4"])
    assert again.policy.model_fields_set == {"template"} and again.rollout.model_fields_set == {"group_size"}
    assert (again.policy.template, again.rl.lr, again.rollout.group_size) == ("compact", 0.001, 4)
    assigned = RunConfig()  # a config object changed in Python: the assignment counts as given, nested ones too
    assigned.policy.lora.enabled = True
    assert api.load_config(assigned).policy.lora.enabled is True
    assert "template" not in api.load_config(assigned).policy.model_fields_set


def test_a_run_with_a_compact_template_is_evaluated_and_exported_with_it(tmp_path, tiny_model_dir, monkeypatch,
                                                                         capsys):
    cfg = build_config(None, [f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=1",
                              "rl.save_every=1", "policy.template=compact", "rollout.history_length=1", *SMALL])
    out, _, _ = run_train(cfg, log=lambda *_: None)
    ckpt = out / "checkpoints" / "step_000001"
    saved = json.loads((ckpt / inference.FILE).read_text())["inference"]
    assert saved == {"policy.template": "compact", "rollout.history": "window", "rollout.history_length": 1}

    seen = []
    original = rollout_factory.prompt_builder

    def spy(policy, rollout, env):
        seen.append((policy.template, rollout.history_length))
        return original(policy, rollout, env)

    monkeypatch.setattr(rollout_factory, "prompt_builder", spy)
    metrics, _ = evaluate_saved_policy(build_config(None, ["env.name=sokoban"]), out, 1)  # the run dir: its checkpoint
    assert seen[-1] == ("compact", 1) and "eval/success_rate" in metrics
    # the same through the API and the CLI, which build the config from flags first: a default the command did
    # not give is no explicit setting, so the model's own layout still applies
    api.evaluate(build_config(None, ["env.name=sokoban"]), model=out, episodes=1)
    assert seen[-1] == ("compact", 1)
    for argv in (["eval", "--model", str(out), "--episodes", "1"],
                 ["eval", "--model", str(out), "--episodes", "1", "policy.template=paper"]):  # given: it wins
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    assert seen[-2] == ("compact", 1)
    assert seen[-1] == ("paper", 1) and "policy.template=paper as given" in capsys.readouterr().err
    (ckpt / inference.FILE).unlink()  # a checkpoint from before the file: its run's config.yaml says
    evaluate_saved_policy(build_config(None, ["env.name=sokoban"]), ckpt, 1)
    assert seen[-1] == ("compact", 1)
    exported = export_policy(ckpt, tmp_path / "exported")
    assert json.loads((exported / inference.FILE).read_text())["inference"]["policy.template"] == "compact"

    # train --model from it: the run takes the model's layout and records it in its config
    cfg = build_config(None, [f"out_dir={tmp_path / 'again'}", f"policy.model={exported}", "rl.steps=0", *SMALL])
    again, _, _ = run_train(cfg, log=lambda *_: None)
    assert "template: compact" in (again / "config.yaml").read_text()
