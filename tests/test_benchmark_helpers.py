"""The learning-check benchmarks reuse a finished run only when its configuration is identical."""

from creditflow.config import build_config

SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=1",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "tensorboard=false"]


def test_finished_run_is_reused_only_for_the_same_config(tmp_path, tiny_model_dir):
    from benchmarks import learning

    out = tmp_path / "grpo_s0"
    overrides = [f"policy.model={tiny_model_dir}", "rl.steps=1", *SMALL]
    first = learning.train_one(out, overrides, 0, ("eval/success_rate",))
    assert first["reused"] is False and first["curves"]["eval/success_rate"]
    again = learning.train_one(out, overrides, 0, ("eval/success_rate",))
    assert again["reused"] is True and again["curves"] == first["curves"]

    def cfg(*extra):
        return build_config(None, [f"out_dir={tmp_path / 'elsewhere'}", "seed=0", *overrides, *extra])

    assert learning.finished_run(out, cfg())  # out_dir does not matter
    assert not learning.finished_run(out, cfg("rl.lr=3e-4"))
    assert not learning.finished_run(out, cfg("rl.steps=2"))  # not finished for a longer budget
    assert not learning.finished_run(tmp_path / "missing", cfg())
