"""The Python API (``creditflow.train`` / ``sft`` / ``evaluate`` / ``rro``): config forms, env forms, results, and
the CLI calling the same functions."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import creditflow
from creditflow import api, envs
from creditflow.cli import main
from creditflow.config import RunConfig
from creditflow.envs.sokoban import SokobanEnv
from creditflow.errors import UserError
from tests.envs import plugin_envs as p

ROOT = Path(__file__).resolve().parents[1]
TINY = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=1",
        "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "tensorboard=false"]


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(envs, "_REGISTERED", {})


def test_import_creditflow_stays_light():
    # the API's functions load the API (and torch) on first use, not on import
    code = ("import sys, creditflow, creditflow.envs; assert 'torch' not in sys.modules, 'torch'; "
            "assert 'creditflow.api' not in sys.modules; assert callable(creditflow.train); "
            "assert creditflow.train.__module__ == 'creditflow.api'; print(creditflow.__version__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_creditflow_train_is_the_api_function_and_no_subpackage_replaces_it():
    import inspect

    import creditflow.auditing.run  # noqa: F401  (the subpackages, imported the usual way)
    import creditflow.pairs.rro  # noqa: F401
    import creditflow.trainer.rl  # noqa: F401

    assert creditflow.train is api.train and creditflow.rro is api.rro and creditflow.audit is api.audit
    assert creditflow.sft is api.sft and creditflow.evaluate is api.evaluate
    assert "resume" in inspect.signature(creditflow.train).parameters  # help() shows the function
    assert creditflow.RunResult is api.RunResult
    with pytest.raises(AttributeError):
        creditflow.nothing_here


def test_the_old_process_package_is_a_deprecated_alias_of_pairs():
    # a plain re-export module (no sys.modules swap): the old module's public names are the new one's objects
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    import creditflow.process.rro\nexcept DeprecationWarning as e:\n    print('warned:', e)\n"
            "warnings.simplefilter('ignore')\nimport creditflow.process.rro as old, creditflow.pairs.rro as new\n"
            "assert old is not new and all(getattr(old, n) is getattr(new, n) for n in old.__all__)\n"
            "assert old.rising_sampler is new.rising_sampler; print('same')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "warned: creditflow.process is renamed creditflow.pairs" in proc.stdout and "same" in proc.stdout


def test_every_config_form_gives_the_same_run_config(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"rl": {"lr": 0.002}, "seed": 3}))
    forms = [RunConfig(seed=3, rl={"lr": 0.002}), {"rl": {"lr": 0.002}, "seed": 3}, ["rl.lr=0.002", "seed=3"],
             str(path), path]
    configs = [api.load_config(form) for form in forms]
    assert all(cfg == configs[0] for cfg in configs)
    assert api.load_config(forms[1], ["seed=4"]).seed == 4 and api.load_config(None).seed == 0
    assert forms[1] == {"rl": {"lr": 0.002}, "seed": 3}  # the caller's dict is not changed
    with pytest.raises(UserError, match="config must be a RunConfig, a dict, a list"):
        api.load_config(42)
    with pytest.raises(UserError, match="rl.nonsense: unknown option"):
        api.load_config({"rl": {"nonsense": 1}})


def test_every_env_form_becomes_a_name_the_run_records(registry):
    cfg = RunConfig()
    assert api.with_env(cfg, "sql").env.name == "sql" and api.with_env(cfg, None) is cfg
    by_class = api.with_env(cfg, p.WalkEnv).env.name
    assert by_class == "tests.envs.plugin_envs:WalkEnv"  # the name the CLI resolves too
    assert api.with_env(cfg, p.make_walk).env.name == "tests.envs.plugin_envs:make_walk"
    by_object = api.with_env(cfg, p.WalkEnv(length=5)).env.name
    assert by_object == "<tests.envs.plugin_envs.WalkEnv object>"
    first, second = envs.make(by_object), envs.make(by_object)
    assert first is not second and first.length == 5  # one deep copy per env
    with pytest.raises(UserError, match="an env object has its options already"):
        api.with_env(RunConfig(env={"kwargs": {"length": 2}}), p.WalkEnv())
    with pytest.raises(UserError, match="env object Uncopyable cannot be copied .*pass its class or a factory"):
        api.with_env(cfg, p.Uncopyable())
    with pytest.raises(UserError, match="env must be a name, an env class, a factory or an env object"):
        api.with_env(cfg, 42)


def test_train_and_evaluate_from_python_with_an_env_object_and_a_factory(tmp_path, tiny_model_dir, registry):
    out = tmp_path / "run"
    result = creditflow.train([f"out_dir={out}", f"policy.model={tiny_model_dir}", "rl.steps=1", *TINY],
                              env=SokobanEnv(size=5))
    assert isinstance(result, api.RunResult) and result.run_dir == out
    assert result.model == out / "checkpoints" / "step_000001" and (result.model / "config.json").exists()
    assert result.metrics["step"] == 1 and 0 <= result.metrics["eval/success_rate"] <= 1
    assert yaml.safe_load((out / "config.yaml").read_text())["env"]["name"] == \
        "<creditflow.envs.sokoban.SokobanEnv object>"
    evaluated = creditflow.evaluate(TINY, env=lambda size=5: SokobanEnv(size=size), model=out, episodes=2)
    assert evaluated.model == out and evaluated.metrics["eval/episodes"] == 2
    assert len(evaluated.trajectories) == 2 and evaluated.trajectories[0].steps
    with pytest.raises(UserError, match="episodes must be a positive integer"):
        creditflow.evaluate(TINY, env="sokoban", model=out, episodes=0)


def test_an_env_without_an_expert_trains_from_a_given_model(tmp_path, tiny_model_dir, registry):
    result = creditflow.train([f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=1", *TINY],
                              env=p.NoExpert)
    assert result.metrics["step"] == 1 and result.model.name == "step_000001"
    with pytest.raises(UserError, match="has no expert .*SFT trains on expert demonstrations"):
        creditflow.sft([f"out_dir={tmp_path / 'sft'}"], env=p.NoExpert)


def test_resume_from_python_keeps_the_env_of_the_run(tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    creditflow.train([f"out_dir={out}", f"policy.model={tiny_model_dir}", "rl.steps=1", *TINY], env="sokoban")
    with pytest.raises(UserError, match="was made with env 'sokoban', not 'sql'"):
        creditflow.train(["rl.steps=2"], resume=out, env="sql")
    with pytest.raises(UserError, match="a resumed run keeps its own config.yaml"):
        creditflow.train({"rl": {"steps": 2}}, resume=out)
    result = creditflow.train(["rl.steps=2"], resume=out)
    assert result.metrics["step"] == 2 and result.model.name == "step_000002"


def test_the_cli_calls_the_api(monkeypatch, tmp_path, capsys):
    calls = []

    def record(name, result):
        def fn(config=None, **kwargs):
            calls.append((name, config, kwargs))
            return result
        monkeypatch.setattr(api, name, fn)

    record("train", api.RunResult(tmp_path, None, {"step": 3, "eval/success_rate": 0.5}))
    record("sft", api.RunResult(tmp_path, tmp_path / "sft_model", {}))
    record("evaluate", api.EvalResult(tmp_path, {"eval/success_rate": 0.25}, []))
    for argv in (["train", "--env", "sql", "rl.steps=3"], ["sft", "--env", "sql"],
                 ["eval", "--model", str(tmp_path), "--env", "sql", "--episodes", "3"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    assert [c[0] for c in calls] == ["train", "sft", "evaluate"]
    assert calls[0][2]["overrides"] == ["env.name=sql", "rl.steps=3"] and calls[0][2]["resume"] is None
    assert {k: calls[0][2][k] for k in ("model", "out", "algo", "curriculum")} == dict.fromkeys(
        ("model", "out", "algo", "curriculum"))
    assert calls[2][1].env.name == "sql"
    assert calls[2][2] == {"model": str(tmp_path), "episodes": 3, "split": "validation"}
    out = capsys.readouterr().out
    assert f"done: step 3, eval success 0.500 -> {tmp_path}" in out and '"eval/success_rate": 0.25' in out


def test_rro_from_python_on_a_user_env_class(tmp_path, tiny_model_dir, registry):
    out = tmp_path / "rro"
    result = creditflow.rro([f"out_dir={out}", f"policy.model={tiny_model_dir}", "rro.tasks=2", "rro.exploration=fixed",
                             "rro.candidates=2", "rro.mc_rollouts=1", "rro.eval_episodes=2", "rro.dpo.epochs=1",
                             "rro.dpo.batch_size=2", "env.kwargs.max_steps=3", "generation.max_new_tokens=6",
                             "tensorboard=false"], env=p.WalkEnv)
    assert result.run_dir == out and (out / "rro_summary.json").exists()
    assert result.metrics["samples_per_step"] == 2.0 and result.metrics["steps"] >= 1
    assert 0 <= result.metrics["sft/eval/success_rate"] <= 1 and "dpo/eval/success_rate" in result.metrics
    assert result.model in (out / "dpo_model", tiny_model_dir)


@pytest.mark.slow
def test_each_env_form_reaches_ray_workers(registry):
    ray = pytest.importorskip("ray")
    from creditflow.rollout.executors import InProcessEnvExecutor, RayEnvExecutor
    from creditflow.rollout.trajectory import StartState

    class LocalEnv(p.WalkEnv):  # defined where no worker can import it: pickled by value
        pass

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        for env in ("sokoban", p.WalkEnv, LocalEnv, lambda: LocalEnv(length=2), p.WalkEnv(length=4)):
            factory = envs.factory(api.with_env(RunConfig(), env).env.name)
            jobs = [(0, StartState(seed=3, actions=["right"])), (1, StartState(seed=4))]
            remote, local = RayEnvExecutor(factory, num_workers=2), InProcessEnvExecutor(factory)
            assert remote.start(jobs) == local.start(jobs)
            assert remote.step([(0, "right"), (1, "left")]) == local.step([(0, "right"), (1, "left")])
            remote.close()
    finally:
        ray.shutdown()


def test_the_api_takes_what_the_cli_takes(tmp_path, tiny_model_dir, capsys):
    """Issue 74 part 4: every option of ``creditflow train`` is a keyword of ``creditflow.train``, checked the same
    way with the same text."""
    result = api.train(env="sokoban", model=tiny_model_dir, out=tmp_path / "run", algo="graphgpo",
                       overrides=[*TINY, "rl.steps=1"])
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (saved["rl"]["algo"], saved["policy"]["model"], saved["out_dir"]) == (
        "graphgpo", str(tiny_model_dir), str(tmp_path / "run"))
    assert result.run_dir == tmp_path / "run" and result.metrics["step"] == 1
    with pytest.raises(UserError) as from_python:
        api.train(env="sokoban", model=tiny_model_dir, out=tmp_path / "x", algo="nope", overrides=TINY)
    with pytest.raises(SystemExit) as exc:
        main(["train", "--env", "sokoban", "--model", str(tiny_model_dir), "--out", str(tmp_path / "x"),
              "--algo", "nope", *TINY])
    assert exc.value.code == 2 and str(from_python.value) in capsys.readouterr().err
    with pytest.raises(TypeError, match="model must be a local model directory"):
        api.train(model=5)
    with pytest.raises(TypeError, match="algo must be a credit estimator name"):
        api.train(algo=["grpo"])
    with pytest.raises(TypeError, match="out must be the run directory"):
        api.sft(out=True)
