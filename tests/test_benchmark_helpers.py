"""Benchmark helpers: the learning checks reuse a finished run only when its configuration is identical;
update_roofline counts FLOPs as torch does."""

import json
import os
from pathlib import Path

import pytest
import torch

from benchmarks import credit_learning
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
    assert learning.finished_run(out, cfg("policy.tiny_vocab_size=2048"))  # unused with a given model
    assert learning.finished_run(out, cfg("rl.save_every=0"))  # checkpoints do not change the run


def test_committed_record_is_reused_without_the_run_directory(tmp_path, tiny_model_dir):
    import shutil

    from benchmarks import learning

    out, record = tmp_path / "runs" / "grpo_s0", tmp_path / "results_runs" / "grpo_s0.json"
    overrides = [f"policy.model={tiny_model_dir}", "rl.steps=1", *SMALL]
    first = learning.train_one(out, overrides, 0, ("eval/success_rate",), record=record)
    assert record.exists() and first["eval_by_env_steps"][-1][0] > 0
    assert {"credit/groups", "train/noop_frac", "train/adv_std"} <= set(first["diagnostics"])
    assert first["diagnostics"]["credit/groups"] > 0  # GRPO's group count, averaged over the steps
    shutil.rmtree(out)  # another machine: only the committed record is there
    again = learning.train_one(out, overrides, 0, ("eval/success_rate",), record=record)
    assert again["reused"] is True and again["final_eval_success"] == first["final_eval_success"]
    assert not out.exists()  # nothing was trained


def test_bootstrap_intervals():
    from benchmarks import learning

    same = learning.interval_estimates([0.4] * 5)
    assert same["ci95"] == [0.4, 0.4] and same["iqm"] == pytest.approx(0.4)
    est = learning.interval_estimates([0.1, 0.2, 0.3, 0.4, 0.9])
    lo, hi = est["ci95"]
    assert lo < 0.38 < hi and 0.1 <= lo and hi <= 0.9  # the mean 0.38 lies inside, within the data's range
    assert est["iqm"] == pytest.approx(0.3)  # middle three of five: 0.2, 0.3, 0.4
    assert learning.interval_estimates([0.3])["ci95"] is None


def test_env_step_curve_averages_each_evaluation_across_seeds():
    """Seeds reach an evaluation after different env-step counts; the k-th evaluations are averaged
    together (at the seeds' mean env steps), never split into per-seed points."""
    from benchmarks import learning

    def run(seed, pts):
        return {"seed": seed, "curves": {}, "eval_by_env_steps": pts, "final_eval_success": pts[-1][1],
                "initial_eval_success": pts[0][1]}

    summary = learning.summarize([run(0, [[0, 0.4], [1000, 0.5], [2400, 0.6]]),
                                  run(1, [[0, 0.4], [1600, 0.3], [2000, 0.4]])], ())
    assert summary["eval_by_env_steps"] == [[0.0, 0.4, 0.0], [1300.0, 0.4, pytest.approx(0.1)],
                                            [2200.0, 0.5, pytest.approx(0.1)]]


def test_record_from_an_older_version_matches_while_new_options_stay_default():
    """A setting added after a record was made (absent from it) matches only at its default."""
    from benchmarks import learning

    want = learning._config_key(build_config(None, ["rl.lr=3e-4"]))
    old = {**want, "policy": {k: v for k, v in want["policy"].items() if k != "backend"}}
    assert learning.same_config(old, want)
    assert not learning.same_config(old, learning._config_key(build_config(None, ["rl.lr=3e-4",
                                                                                    "policy.backend=vllm"])))
    assert not learning.same_config(old, learning._config_key(build_config(None, ["rl.lr=1e-3"])))
    assert not learning.same_config({**old, "gone": 1}, want)  # a setting this version lacks
    assert not learning.same_config(None, want)


def test_records_compare_the_precision_a_run_trained_in_not_its_device(monkeypatch):
    """A float32 run on a GPU is the same run as ``dtype=auto`` on a CPU (auto = float32 there); ``auto`` on a
    bf16 GPU is bfloat16 and is not. Old records (made with ``auto``, all on CPUs) and old records with LoRA
    off under ``rro.dpo`` (since moved to ``policy.lora``) still match."""
    from benchmarks import learning

    cpu_auto = learning._config_key(build_config(None, ["policy.model=m"]))
    assert cpu_auto["policy"]["dtype"] == "float32"  # resolved when the key is made
    gpu_fp32 = learning._config_key(build_config(None, ["policy.model=m", "policy.dtype=float32",
                                                        "policy.device=cuda"]))
    assert learning.same_config(gpu_fp32, cpu_auto)
    assert learning.same_config({**cpu_auto, "policy": {**cpu_auto["policy"], "dtype": "auto"}}, cpu_auto)
    assert learning.same_config({**cpu_auto, "policy": {**cpu_auto["policy"], "dtype": "fp32"}}, cpu_auto)
    assert not learning.same_config({**cpu_auto, "policy": {**cpu_auto["policy"], "dtype": "bfloat16"}}, cpu_auto)

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.is_bf16_supported", lambda *a, **k: True)
    gpu_auto = learning._config_key(build_config(None, ["policy.model=m"]))
    assert gpu_auto["policy"]["dtype"] == "bfloat16" and not learning.same_config(gpu_auto, cpu_auto)
    monkeypatch.undo()

    rro = cpu_auto["rro"]
    old = {**cpu_auto, "rro": {**rro, "dpo": {**rro["dpo"], "lora": False, "lora_r": 16}}}
    assert learning.same_config(old, cpu_auto)
    assert not learning.same_config({**old, "rro": {**rro, "dpo": {**rro["dpo"], "lora": True}}}, cpu_auto)


def test_tiny_default_build_settings_do_not_split_runs_from_a_given_model():
    """With ``policy.model`` set, the tiny default's build settings are unused, so a record made when their
    defaults differed still matches; without a model they build the policy and must match."""
    from benchmarks import learning

    given = learning._config_key(build_config(None, ["policy.model=runs/sft/sft_model"]))
    stored = {**given, "policy": {**given["policy"], "tiny_vocab_size": 1024}}
    assert learning.same_config(stored, given)
    assert not learning.same_config({**stored, "rl": {**stored["rl"], "lr": 1.0}}, given)
    tiny = learning._config_key(build_config(None, []))
    assert not learning.same_config({**tiny, "policy": {**tiny["policy"], "tiny_vocab_size": 1024}}, tiny)


def test_crps_tables_only_keep_the_mixture_check(tmp_path, monkeypatch):
    """``--only-recorded`` trains nothing and skips the random-policy mixture check, so it keeps the one the
    results it rewrites already hold."""
    import json
    import sys

    from benchmarks import crps_learning

    out = tmp_path / "crps_hard"
    mixture = {"grpo": {"groups/all_zero_frac": 0.875, "groups/all_one_frac": 0.0, "groups/entropy": 0.078,
                        "crps/buffer_size": 0.0, "crps/mean_k": 0.0, "crps/replay_share": 0.0,
                        "crps/replay_acc": None}}
    out.with_suffix(".json").write_text(json.dumps({"mixture_check": {"means_over_second_half": mixture}}))
    monkeypatch.setattr(sys, "argv", ["crps_learning.py", "--only-recorded", "--model", str(tmp_path / "sft"),
                                      "--seeds", "0", "--out", str(out), "--work", str(tmp_path / "runs")])
    crps_learning.main()
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["mixture_check"]["means_over_second_half"] == mixture and result["runs"] == {}
    assert "| grpo | 0.875 |" in out.with_suffix(".md").read_text()


@pytest.mark.parametrize("setting", list(credit_learning.SETTINGS))
def test_credit_learning_settings_build_valid_configs(setting):
    """Each setting's env, its pi_SFT recipe (SFT + SFT_EXTRA) and the RL budget are valid config overrides."""
    c = credit_learning
    env = c.SETTINGS[setting]
    sft = build_config(None, [*env, *c.SFT, *c.SFT_EXTRA.get(setting, [])])
    rl = build_config(None, [*env, *c.FULL])
    assert sft.env.name == rl.env.name == env[0].split("=")[1]
    if setting == "household":  # 800 demos x 4 epochs over 400 training games (0 held-out successes with less)
        assert (sft.sft.demos, sft.sft.epochs, rl.env.kwargs["num_games"]) == (800, 4, 400)


def test_build_sft_makes_only_the_shared_pi_sft_and_names_its_weights(tmp_path, monkeypatch, capsys):
    """``--build-sft DIR`` builds the setting's pi_SFT into DIR/sft_model (what ``--model`` and gpu_batch.sh are
    given), prints the sha256 the records will carry, and trains and tabulates nothing."""
    import sys

    from benchmarks import credit_learning, learning

    out, work = tmp_path / "credit", tmp_path / "runs"
    monkeypatch.setattr(sys, "argv", [credit_learning.__file__, "--smoke", "--setting", "hard", "--build-sft",
                                      str(tmp_path / "hard_sft"), "--out", str(out), "--work", str(work)])
    credit_learning.main()
    model = tmp_path / "hard_sft" / "sft_model"
    assert (model / "config.json").exists()
    assert f"sha256 {learning.weights_sha256(model)}" in capsys.readouterr().out
    assert not out.with_suffix(".json").exists() and not (tmp_path / "credit_runs").exists()


def test_jobs_train_missing_runs_as_child_processes_then_tabulate(tmp_path, monkeypatch, tiny_model_dir):
    """``--jobs 2`` trains each missing (method, seed) in its own process (this script with ``--one``), each
    writing its record; the parent then tabulates every run from the records, and a rerun trains nothing."""
    import json
    import sys

    from benchmarks import credit_learning

    out, work = tmp_path / "credit", tmp_path / "runs"
    argv = [credit_learning.__file__, "--smoke", "--jobs", "2", "--model", str(tiny_model_dir), "--seeds", "0",
            "--methods", "grpo", "rewardflow", "--out", str(out), "--work", str(work), "--shared", "an audit, 1 thread"]
    monkeypatch.setattr(sys, "argv", argv)
    credit_learning.main()
    logs = work.with_name(work.name + "_smoke") / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["grpo_s0.log", "rewardflow_s0.log"]
    result = json.loads(out.with_suffix(".json").read_text())
    assert sorted(result["runs"]) == ["grpo", "rewardflow"]
    records = sorted(p.name for p in (tmp_path / "credit_runs").iterdir())
    assert records == ["grpo_s0.json", "rewardflow_s0.json"]
    for name in records:  # each trained in its own child, which logged it and recorded its machine
        stored = json.loads((tmp_path / "credit_runs" / name).read_text())
        assert stored["record"]["reused"] is False
        machine = stored["machine"]
        assert machine["shared"] == "an audit, 1 thread" and machine["torch_threads"] == 1 and machine["cores"]
        assert len(machine["load_average_start"]) == len(machine["load_average_end"]) == 3
        assert "held-out success" in (logs / name.replace(".json", ".log")).read_text()

    for log in logs.iterdir():
        log.unlink()
    credit_learning.main()  # every record is there: no child is started
    assert not list(logs.iterdir()) and sorted(json.loads(out.with_suffix(".json").read_text())["runs"]) == [
        "grpo", "rewardflow"]


def test_stopped_run_continues_from_its_checkpoint_with_the_same_metrics(tmp_path, tiny_model_dir, monkeypatch):
    """A run cut off after its step-2 checkpoint (a killed job, an ended lease) is continued, not trained
    again, and ends where the uninterrupted run ends, also after the trip back from a GPU machine packed by
    benchmarks/gpu_pack.py; a directory of another config is trained afresh."""
    import shutil
    import tarfile

    from benchmarks import gpu_pack, learning
    from creditflow.trainer.metrics import read_metrics

    overrides = [f"policy.model={tiny_model_dir}", "rl.steps=3", "rl.save_every=1", *SMALL]
    whole = learning.train_one(tmp_path / "whole", overrides, 0, ("train/success_rate", "eval/success_rate"))
    assert whole["resumed_at_step"] is None
    cut = tmp_path / "work" / "grpo_s0"
    shutil.copytree(tmp_path / "whole", cut)
    shutil.rmtree(cut / "checkpoints" / "step_000003")
    (cut / "checkpoints" / "latest").write_text("step_000002")
    rows = [line for line in (cut / "metrics.jsonl").read_text().splitlines() if '"step": 3' not in line]
    (cut / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    assert read_metrics(cut / "metrics.jsonl")[-1]["step"] == 2

    def cfg(*extra):
        return build_config(None, [f"out_dir={cut}", "seed=0", *overrides, *extra])

    assert learning.resumable_step(cut, cfg()) == 2
    assert learning.resumable_step(cut, cfg("rl.lr=3e-4")) is None  # another config: start again
    assert learning.resumable_step(tmp_path / "whole", cfg()) is None  # finished: nothing to continue
    # the trip back from a GPU machine: config, metrics and newest checkpoint packed, the run directory gone
    monkeypatch.chdir(tmp_path)
    packed = gpu_pack.pack(Path("work"), tmp_path / "out", limit=6)
    assert [p.name for p in packed] == ["run_grpo_s0.tgz"]
    assert gpu_pack.unfinished(tmp_path / "whole_only") == []
    shutil.rmtree(cut)
    with tarfile.open(packed[0]) as tar:
        tar.extractall(tmp_path, filter="data")
    assert sorted(p.name for p in (cut / "checkpoints").iterdir() if p.name.startswith("step_")) == ["step_000002"]
    assert learning.resumable_step(cut, cfg()) == 2
    again = learning.train_one(cut, overrides, 0, ("train/success_rate", "eval/success_rate"))
    assert again["resumed_at_step"] == 2 and again["reused"] is False
    assert again["curves"] == whole["curves"] and again["env_steps"] == whole["env_steps"]


def test_jobs_parent_stopped_by_sigterm_stops_its_children(tmp_path, tiny_model_dir):
    """`timeout` or a scheduler sends SIGTERM to the --jobs parent: it stops every child with it (none keeps
    training unseen), exits non-zero and says how to continue. GNU `timeout` signals the parent and then its
    whole process group, so a second SIGTERM arrives while the parent stops its children: no traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from benchmarks import credit_learning

    work = tmp_path / "runs"
    cmd = [sys.executable, "-m", "benchmarks.credit_learning", "--jobs", "2", "--model", str(tiny_model_dir),
           "--seeds", "0", "--steps", "50", "--methods", "grpo", "rewardflow", "--out", str(tmp_path / "credit"),
           "--work", str(work), "--", *SMALL]

    def children():
        found = []
        for proc in Path("/proc").iterdir():
            try:
                line = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--one" in line and str(work).encode() in line:
                found.append(int(proc.name))
        return found

    parent = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=Path(credit_learning.__file__).parents[1], start_new_session=True)
    deadline = time.time() + 120
    while len(children()) < 2 and time.time() < deadline and parent.poll() is None:
        time.sleep(0.5)
    assert len(children()) == 2, parent.communicate()
    time.sleep(3)  # the children are importing or training
    os.kill(parent.pid, signal.SIGTERM)  # as `timeout` does: the parent, then its process group
    os.killpg(parent.pid, signal.SIGTERM)
    deadline = time.time() + 60
    while parent.poll() is None and time.time() < deadline:  # more while it stops its children
        time.sleep(0.005)
        if parent.poll() is None:
            os.kill(parent.pid, signal.SIGTERM)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode != 0
    assert "stopped: grpo seed 0, rewardflow seed 0 interrupted" in err and "rerun the same command" in err
    assert "Traceback" not in err, err
    assert not children()


def test_roofline_flop_count_matches_torch_flop_counter():
    """update_roofline counts a forward's FLOPs from the shapes: the linear maps and LM head as torch's
    FlopCounterMode counts them; attention as the eager implementation's two products (every query-key
    pair: the counter does not know the mask)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Qwen2ForCausalLM

    from benchmarks.update_roofline import flops, model_shape
    from creditflow.policy.tiny import tiny_config

    config = tiny_config(attn_implementation="eager")
    config.vocab_size = 300
    model = Qwen2ForCausalLM(config)
    rows, length = 2, 37
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=torch.randint(3, 300, (rows, length)))
    counted = flops(model_shape(model), tokens=rows * length, head_positions=rows * length,
                    attention_pairs=rows * length * length)
    assert counter.get_total_flops() == counted["linear"] + counted["attention"]


def test_roofline_floor_splits_a_step_into_linear_and_attention_work():
    """The 5x check's floor: a step's FLOPs split into linear maps and attention (summing to the step's),
    each at its own rate; hand-computed on a conversation step of 2 episodes of 10 tokens."""
    from benchmarks.update_roofline import causal_pairs, floor_seconds, step_flops

    shape = {"hidden": 4, "layers": 2, "vocab": 10, "linear_params": 100}
    work = {"decisions": 4, "episodes": 2, "prefill_tokens": 16, "generated_tokens": 4, "train_rows": 2,
            "train_row_tokens": 20, "trained_tokens": 4, "rollout_s": 1.0, "update_s": 1.0}
    f = step_flops(shape, work, "conversation")
    rollout_linear = 2 * 100 * 20 + 2 * 10 * 4 * (4 + 4)  # 20 tokens through the layers, 8 LM-head positions
    update_linear = 3 * (2 * 100 * 20 + 2 * 10 * 4 * 4)  # fwd + bwd
    attention = 2 * causal_pairs(10) * 2 * 2 * 4 * 2  # two 10-token episodes, QK^T and AV, 2 layers
    assert f["linear_gflop"] * 1e9 == pytest.approx(rollout_linear + update_linear)
    assert f["attention_gflop"] * 1e9 == pytest.approx(attention + 3.5 * attention)
    assert f["linear_gflop"] + f["attention_gflop"] == pytest.approx(f["step_gflop"])
    assert floor_seconds({"linear_gflop": 300.0, "attention_gflop": 50.0}, 150.0, 25.0) == pytest.approx(4.0)


def test_machine_info_names_the_cpu_generation(tmp_path):
    """Results say which CPU generation ran them: family/model and the vector extensions that set matmul
    rates, from the first processor's block of /proc/cpuinfo."""
    from benchmarks.machine import cpu_generation

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n"
                    "processor\t: 1\ncpu family\t: 99\nmodel\t\t: 1\nflags\t\t: fpu\n")
    assert cpu_generation(str(info)) == {"cpu_family_model": "25/17", "isa": ["avx2", "avx512f", "avx512_bf16"]}
    assert cpu_generation(str(tmp_path / "missing")) == {}


def fake_rro_runs(monkeypatch, calls: list) -> None:
    """rro_samples with its collection, DPO and evaluation replaced by fakes; ``calls`` gets
    ``("collect", out_dir, data_dir, exploration)`` and ``("dpo", out_dir, sft_weight, lr, device, dtype)`` in
    order."""
    import os

    from benchmarks import rro_samples

    # main() hides the GPUs from a CPU run (CUDA_VISIBLE_DEVICES=""): restored after the test
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "0"))

    def collect(cfg, log, model_path):
        calls.append(("collect", cfg.out_dir, cfg.rro.data_dir, cfg.rro.exploration))
        return {"samples_per_step": 2.0 if cfg.rro.exploration == "rising" else 5.0, "steps": 4, "pairs": 3,
                "rollouts": 10, "generated_tokens": 100, "wall_seconds": 1.0,
                "totals": {"omitted_no_rising": 0, "omitted_no_contrast": 1}}

    def dpo(cfg, log, model_path):
        calls.append(("dpo", cfg.out_dir, cfg.rro.dpo.sft_weight, cfg.rro.dpo.lr, cfg.policy.device,
                      cfg.policy.dtype))
        return model_path, {"dpo/steps": 1, "dpo/train_loss": 0.6}

    monkeypatch.setattr(rro_samples, "run_collect", collect)
    monkeypatch.setattr(rro_samples, "run_dpo", dpo)
    monkeypatch.setattr(rro_samples, "held_out_metrics", lambda cfg, path, n: {"eval/success_rate": 0.5,
                                                                              "eval/score": 0.5})


def collected(calls: list) -> list[str]:
    return [c[3] for c in calls if c[0] == "collect"]


def test_rro_samples_runs_one_arm_now_and_tabulates_when_both_are_done(tmp_path, monkeypatch, tiny_model_dir):
    """``--methods rising`` trains only the rising arm and writes no table while fixed-5 has no run; a later
    ``--methods fixed`` trains fixed-5, reuses the stored rising run and writes both, in the usual order."""
    import json
    import sys

    from benchmarks import rro_samples

    calls = []
    fake_rro_runs(monkeypatch, calls)
    out = tmp_path / "rro"
    argv = ["rro_samples.py", "--model", str(tiny_model_dir), "--seeds", "0", "--tasks", "2", "--out", str(out),
            "--work", str(tmp_path / "work")]
    monkeypatch.setattr(sys, "argv", [*argv, "--methods", "rising"])
    rro_samples.main()
    assert collected(calls) == ["rising"] and not out.with_suffix(".json").exists()
    assert (tmp_path / "rro_runs" / "rising_s0.json").exists()
    monkeypatch.setattr(sys, "argv", [*argv, "--methods", "fixed"])
    rro_samples.main()
    assert collected(calls) == ["rising", "fixed"]
    result = json.loads(out.with_suffix(".json").read_text())
    assert [r["method"] for r in result["runs"]] == ["fixed", "rising"]
    assert result["summary"]["rising"]["samples_per_step"]["values"] == [2.0]
    assert "methods" not in result["settings"]


def test_rro_samples_does_not_reuse_runs_of_a_rebuilt_sft_at_the_same_path(tmp_path, monkeypatch, tiny_model_dir):
    """Record keys carry the π_SFT's weight hash: other weights at the same path start new runs."""
    import shutil
    import sys

    from benchmarks import rro_samples

    calls = []
    fake_rro_runs(monkeypatch, calls)
    model = tmp_path / "sft"
    shutil.copytree(tiny_model_dir, model)
    argv = ["rro_samples.py", "--model", str(model), "--seeds", "0", "--tasks", "2", "--out", str(tmp_path / "rro"),
            "--work", str(tmp_path / "work"), "--methods", "rising"]
    monkeypatch.setattr(sys, "argv", argv)
    rro_samples.main()
    rro_samples.main()
    assert collected(calls) == ["rising"]  # same weights: the stored run is reused
    weights = next(model.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes() + b"\0")
    rro_samples.main()
    assert collected(calls) == ["rising", "rising"]


@pytest.mark.parametrize("flag, value, suffix, weight, lr, device", [
    ("--dpo-sft-weight", "1", "_sftw1", 1.0, 1e-4, ("auto", "auto")),
    ("--dpo-lr", "2e-5", "_lr2e-05", 0.0, 2e-5, ("auto", "auto")),
    ("--device", "cuda", "_cuda", 0.0, 1e-4, ("cuda", "float32"))])
def test_rro_samples_dpo_variant_trains_on_the_plain_runs_collection(tmp_path, monkeypatch, tiny_model_dir, flag,
                                                                     value, suffix, weight, lr, device):
    """A DPO variant (``--dpo-sft-weight 1``, ``--dpo-lr 2e-5``, ``--device cuda``) trains DPO in its own
    directory on the plain run's preferences, with its setting, and writes ``<name><suffix>`` results; the plain
    run's records are left alone. On CUDA the weights stay float32 (bfloat16 would round DPO's steps away)."""
    import json
    import sys

    from benchmarks import rro_samples

    seen = []
    fake_rro_runs(monkeypatch, seen)
    work, results = tmp_path / "work", tmp_path / "results"
    monkeypatch.setattr(rro_samples, "__file__", str(tmp_path / "rro_samples.py"))
    argv = ["rro_samples.py", "--model", str(tiny_model_dir), "--seeds", "0", "--tasks", "2", "--work", str(work),
            "--methods", "rising", flag, value]
    (work / "fixed_s0" / "preferences").mkdir(parents=True)  # an unfinished plain collection
    (work / "fixed_s0" / "preferences" / "tasks.jsonl").write_text('{"task": 0}\n')
    monkeypatch.setattr(sys, "argv", argv)
    rro_samples.main()
    assert seen == [("collect", str(work / f"rising_s0{suffix}"), str(work / "rising_s0" / "preferences"), "rising"),
                    ("dpo", str(work / f"rising_s0{suffix}"), weight, lr, *device)]
    import os

    # a CPU run hides the GPUs, so policy.device=auto (in its key) cannot mean CUDA on a GPU host
    assert (os.environ["CUDA_VISIBLE_DEVICES"] == "") == (flag != "--device")
    record = json.loads((results / f"rro_samples{suffix}_runs" / "rising_s0.json").read_text())
    assert record["machine"]["cores"] >= 1 and "note" in record  # where it ran and what shared the cores
    assert not (results / "rro_samples_runs").exists()
    # the plain suite owns the collections' snapshot: the variant writes none
    assert not list((results / f"rro_samples{suffix}_runs").glob("unfinished_collections_*"))


def test_rro_samples_invalid_action_reward_collects_apart(tmp_path, monkeypatch, tiny_model_dir):
    """``--invalid-action-reward -1`` sets rro.invalid_action_reward and keeps its collections, records and
    results apart from the paper rule's (``<work>_invalid-1``, ``<name>_invalid-1``)."""
    import sys

    from benchmarks import rro_samples

    calls, seen = [], []
    fake_rro_runs(monkeypatch, calls)
    fake_collect = rro_samples.run_collect

    def collect(cfg, log, model_path):
        seen.append(cfg.rro.invalid_action_reward)
        return fake_collect(cfg, log, model_path)

    monkeypatch.setattr(rro_samples, "run_collect", collect)
    monkeypatch.setattr(rro_samples, "__file__", str(tmp_path / "rro_samples.py"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["rro_samples.py", "--model", str(tiny_model_dir), "--seeds", "0", "--tasks",
                                      "2", "--methods", "rising", "--invalid-action-reward", "-1"])
    rro_samples.main()
    assert seen == [-1.0] and calls[0][1] == "runs/bench_rro_invalid-1/rising_s0"
    assert (tmp_path / "results" / "rro_samples_invalid-1_runs" / "rising_s0.json").exists()
    assert not (tmp_path / "results" / "rro_samples_runs").exists()


def test_rro_samples_unfinished_collections_travel_in_a_snapshot(tmp_path):
    """An unfinished collection is kept in the snapshot and unpacked where a work directory has fewer of its
    tasks; a finished suite leaves no snapshot."""
    from benchmarks.rro_samples import restore_collections, snapshot_collections

    def collection(work, name, tasks):
        d = work / name / "preferences"
        d.mkdir(parents=True)
        (d / "tasks.jsonl").write_text("".join(f'{{"task": {i}}}\n' for i in range(tasks)))
        (d / "preferences.jsonl").write_text(f"{name}\n")

    work, snap = tmp_path / "work", tmp_path / "records" / "unfinished.tgz"
    collection(work, "rising_s0", 3)
    collection(work, "fixed_s0", 0)
    snapshot_collections(snap, work, ["rising_s0", "fixed_s0", "rising_s1"])
    fresh = tmp_path / "fresh"
    restore_collections(snap, fresh, print)
    assert (fresh / "rising_s0" / "preferences" / "tasks.jsonl").read_text().count("\n") == 3
    assert not (fresh / "fixed_s0").exists()
    ahead = tmp_path / "ahead"
    collection(ahead, "rising_s0", 5)
    restore_collections(snap, ahead, print)
    assert (ahead / "rising_s0" / "preferences" / "tasks.jsonl").read_text().count("\n") == 5
    snapshot_collections(snap, work, ["fixed_s0"])
    assert not snap.exists()


def test_rro_samples_snapshot_keeps_the_collections_of_seeds_this_command_did_not_run(tmp_path):
    """A command for seed 3 must not drop seed 0's unfinished collection from the snapshot; a collection
    whose run has its record is finished."""
    import json
    from types import SimpleNamespace

    from benchmarks.rro_samples import record_key, unfinished

    args = SimpleNamespace(temperature=1.0, max_new_tokens=48, tasks=4, mc_rollouts=5, candidates=5,
                           eval_episodes=8, executor="inprocess", dpo_lr=1e-4, dpo_batch=16, dpo_epochs=3.0,
                           device="cpu", dpo_sft_weight=0.0, dpo_pairs="all", invalid_action_reward=None,
                           env_max_steps=None, env="webshop", bare_grid=False, history=0, seeds=[3])
    key = {"model": "m", "sft_sha256": "abc"}
    work, records = tmp_path / "work", tmp_path / "records"
    for name in ("rising_s0", "rising_s3", "fixed_s3", "eval_sft", "records"):
        (work / name).mkdir(parents=True)
    records.mkdir()
    (records / "rising_s3.json").write_text(json.dumps({"key": record_key(args, key, "rising", 3), "value": {}}))
    assert unfinished(args, key, work, records) == ["fixed_s3", "rising_s0"]


def test_rro_pairs_counts_pairs_that_prefer_an_invalid_action(tmp_path):
    """A pair's chosen action is invalid when the explored trajectory's step is (older collections) or when
    its ``chosen_valid`` says so; rejected ones are counted only where the field exists."""
    import json

    from benchmarks.rro_pairs import count

    d = tmp_path / "preferences"
    d.mkdir()
    steps = [{"valid": True, "state": "s0"}, {"valid": False, "state": "s0"}, {"valid": True, "state": "s1"}]
    (d / "trajectories.jsonl").write_text(json.dumps({"task_id": "t/0", "steps": steps}) + "\n")
    pairs = [{"task_id": "t/0", "step": 1}, {"task_id": "t/0", "step": 2},
             {"task_id": "t/0", "step": 3, "chosen_valid": False, "rejected_valid": False}]
    (d / "preferences.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    (d / "tasks.jsonl").write_text('{"task_id": "t/0"}\n')
    r = count(d)
    assert (r["tasks"], r["pairs"], r["chosen_invalid"], r["rejected_invalid"]) == (1, 3, 2, 1)
    assert (r["explored_steps"], r["explored_invalid"]) == (3, 1)


def test_webshop_actions_classifies_steps_by_page_and_kind():
    """Hand-made episodes: each step lands in its page/kind with its invalid flag; a purchase ends on ``done``."""
    from benchmarks.webshop_actions import action_kind, breakdown
    from creditflow.rollout.trajectory import Step, Trajectory

    assert [action_kind(a, p) for a, p in [("search[red shoes]", "search"), ("click[B0ABCDEF12]", "results"),
                                           ("click[black]", "item"), ("click[black]", "results"),
                                           ("click[Buy Now]", "item"), ("click[features]", "item"),
                                           ("click[< Prev]", "item"), ("buy it", "item")]] == \
        ["search", "click-product", "click-option", "click-other", "buy", "tab", "nav", "malformed"]

    def step(page, action, valid=True, after=None):
        return Step(state=f"{page}|q=-", observation="", action=action, valid=valid,
                    next_state=f"{after or page}|q=-")

    bought = Trajectory("a", [step("search", "search[x]", after="results"), step("results", "click[b0abcdef12]",
                                                                                  after="item"),
                              step("item", "click[red]", valid=False), step("item", "click[buy now]", after="done")],
                        score=0.5)
    lost = Trajectory("b", [step("search", "search[y]", after="results"), step("results", "click[b0zzzzzzzz]",
                                                                                valid=False)])
    out = breakdown([bought, lost])
    assert (out["episodes"], out["steps"], out["bought"], out["invalid_frac"], out["score"]) == (2, 6, 0.5, 2 / 6,
                                                                                                 0.25)
    assert {k: (v["steps"], v["invalid"]) for k, v in out["kinds"].items()} == {
        "search/search": (2, 0), "results/click-product": (2, 1), "item/click-option": (1, 1), "item/buy": (1, 0)}


def test_rro_pairs_kinds_name_each_pairs_page_and_action_kinds(tmp_path):
    """``--kinds``: a pair is counted under the page its step was taken on and its actions' kinds, with * on
    an invalid action (the chosen one's from the trajectory where the pair has no ``chosen_valid``)."""
    import json

    from benchmarks.rro_pairs import count

    d = tmp_path / "preferences"
    d.mkdir()
    steps = [{"valid": True, "state": "results|q=x"}, {"valid": False, "state": "item|q=x"}]
    (d / "trajectories.jsonl").write_text(json.dumps({"task_id": "t/0", "steps": steps}) + "\n")
    pairs = [{"task_id": "t/0", "step": 1, "chosen_action": "click[b0abcdef12]", "rejected_action": "click[red]",
              "rejected_valid": False},
             {"task_id": "t/0", "step": 2, "chosen_action": "click[red]", "rejected_action": "click[buy now]"}]
    (d / "preferences.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    (d / "tasks.jsonl").write_text('{"task_id": "t/0"}\n')
    assert count(d, kinds=True)["kinds"] == {"results: click-product > click-other*": 1,
                                             "item: click-option* > buy": 1}
    assert "kinds" not in count(d)


def test_rro_dpo_settings_lines_up_every_variant_of_one_collection(tmp_path):
    """rro_dpo_settings reads every variant's stored runs (not smoke runs, not runs without the π_SFT's weights
    hash, not another env's) and tabulates them per collection, π_SFT first as each device evaluated it, with the
    DPO pairs each trained on."""
    import json

    from benchmarks import rro_dpo_settings

    def store(path, key, value, **extra):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "value": value, **extra}))

    def suite(name, settings, score, sha="a" * 64, device_gpu=None):
        runs = tmp_path / f"{name}_runs"
        store(runs / "sft_eval.json", {}, {"eval/score": 0.42, "eval/success_rate": 0.05})
        key = {"settings": settings} | ({"sft_sha256": sha} if sha else {})
        store(runs / "rising_s3.json", key, {"method": "rising", "seed": 3, "pairs": 7, "score": score,
                                             "success_rate": 0.06, "dpo_chosen_reward": 0.1,
                                             "dpo_rejected_reward": -0.2},
              machine={"cpu": "X", "cores": 2, **({"gpu": device_gpu} if device_gpu else {})}, note="alone")
        store(runs / "shopping_rising_s3.json", {}, {"bought": 0.5, "invalid_frac": 0.25})

    suite("rro_samples_webshop", ["rro.dpo.lr=0.0001"], 0.30)
    suite("rro_samples_webshop_lr3e-05_cuda", ["rro.dpo.lr=3e-05", "policy.device=cuda"], 0.43, device_gpu="H200")
    suite("rro_samples_webshop_sftw1", ["rro.dpo.lr=0.0001", "rro.dpo.sft_weight=1.0"], 0.41)
    suite("rro_samples_webshop_invalid-1", ["rro.dpo.lr=0.0001", "rro.invalid_action_reward=-1.0"], 0.31)
    suite("rro_samples_webshop_validchosen", ["rro.dpo.lr=0.0001", "rro.dpo.pairs=valid_chosen"], 0.40)
    suite("rro_samples_webshop_smoke", ["rro.dpo.lr=0.0001"], 0.99)
    suite("rro_samples_webshop_first_sft", ["rro.dpo.lr=0.0001"], 0.98, sha=None)
    suite("rro_samples", ["rro.dpo.lr=0.0001"], 0.97)  # sokoban

    rows = rro_dpo_settings.read_runs(tmp_path, "webshop")
    assert [(r["invalid_action_reward"], r["dpo_lr"], r["sft_weight"], r["dpo_pairs"], r["device"], r["score"])
            for r in rows] == [
        ("-1.0", 1e-4, 0.0, "all", "cpu", 0.31),
        ("MC estimate", 3e-5, 0.0, "all", "cuda", 0.43), ("MC estimate", 1e-4, 0.0, "all", "cpu", 0.30),
        ("MC estimate", 1e-4, 0.0, "valid chosen", "cpu", 0.40),
        ("MC estimate", 1e-4, 1.0, "all", "cpu", 0.41)]  # per collection: plain DPO by lr, valid chosen, then RPO
    assert rows[1]["machine"] == "H200" and rows[1]["bought"] == 0.5
    md = "\n".join(rro_dpo_settings.table(rows))
    assert md.count("## rising s3") == 2 and "| π_SFT | – | – | – | cuda | 0.420 |" in md
    assert "| π_DPO | 3e-05 | 0 | all | cuda | 0.430 | 0.060 | 0.50 | 0.25 | +0.100 | -0.200 |" in md
    assert [r["score"] for r in rro_dpo_settings.read_runs(tmp_path, "sokoban")] == [0.97]


def test_rro_samples_sigterm_stops_cleanly_and_keeps_the_collection(tmp_path, monkeypatch, tiny_model_dir):
    """SIGTERM mid-collection (how a background job is stopped) ends with exit code 130, the collection so far
    in the snapshot, and the process's SIGTERM handler as it was."""
    import os
    import signal
    import sys
    import tarfile

    from benchmarks import rro_samples
    from creditflow.recipes.rro import data_dir

    calls = []
    fake_rro_runs(monkeypatch, calls)

    def collect(cfg, log, model_path):
        prefs = data_dir(cfg)
        prefs.mkdir(parents=True, exist_ok=True)
        (prefs / "tasks.jsonl").write_text('{"task": 0}\n')
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the collection")

    monkeypatch.setattr(rro_samples, "run_collect", collect)
    monkeypatch.setattr(sys, "argv", ["rro_samples.py", "--model", str(tiny_model_dir), "--seeds", "0", "--tasks",
                                      "2", "--out", str(tmp_path / "rro"), "--work", str(tmp_path / "work"),
                                      "--methods", "rising"])
    before = signal.getsignal(signal.SIGTERM)
    assert rro_samples.cli() == 130
    assert signal.getsignal(signal.SIGTERM) is before
    (snapshot,) = (tmp_path / "rro_runs").glob("unfinished_collections_*.tgz")
    with tarfile.open(snapshot) as tar:
        assert "rising_s0/preferences/tasks.jsonl" in tar.getnames()
    assert not (tmp_path / "rro_runs" / "rising_s0.json").exists()


def test_demo_seeds_continues_an_interrupted_seed_from_its_checkpoint(tmp_path, monkeypatch):
    """A seed whose RL left a checkpoint resumes it (``creditflow train --resume``) instead of failing on the
    existing run directory; a seed stopped before RL's first checkpoint starts again from nothing."""
    import json
    import subprocess

    from benchmarks import demo_seeds

    calls = []

    def fake_run(cmd, check, stdout, stderr):
        calls.append(cmd)
        out = Path(next(a.split("=", 1)[1] for a in cmd if a.startswith("out_dir=")) if "demo" in cmd else cmd[-1])
        out.mkdir(parents=True, exist_ok=True)
        rows = [{"step": 0, "eval/success_rate": 0.25, "test/success_rate": 0.5},
                {"step": 3, "eval/success_rate": 0.5, "test/success_rate": 0.75, "train/success_rate": 0.5}]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    monkeypatch.setattr(subprocess, "run", fake_run)
    (tmp_path / "s0" / "checkpoints" / "latest").mkdir(parents=True)
    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "stale").write_text("x")
    resumed = demo_seeds.run_seed(0, 8, [], tmp_path, test_levels=8)
    fresh = demo_seeds.run_seed(1, 8, [], tmp_path, test_levels=8)
    assert calls[0][-3:] == ["train", "--resume", str(tmp_path / "s0")]
    assert calls[1][3] == "demo" and not (tmp_path / "s1" / "stale").exists()
    assert "resumed" in resumed and "resumed" not in fresh
    assert (resumed["sft_test_success"], resumed["final_test_success"]) == (0.5, 0.75)


def test_grpo_record_from_before_the_ddof_knob_matches_the_pinned_arm(tmp_path):
    """GRPO records made before ``rl.credit.ddof`` existed (issue 74) ran with ddof 0, which the learning checks'
    GRPO arms now pin: they stay reusable (and in the summaries); a GRPO run at today's default (1) is another
    run, new records name their ddof, and other estimators are not touched."""
    import json

    from benchmarks import learning

    base = ["rl.steps=3"]

    def cfg(*extra):
        return build_config(None, [*base, *extra])

    record = tmp_path / "grpo_s0.json"
    old = learning._config_key(cfg("rl.algo=grpo"))
    old["rl"]["credit"] = {}  # as the records of then hold it
    record.write_text(json.dumps({"config": old, "record": {}}))
    assert learning.recorded([*base, "rl.algo=grpo", "rl.credit.ddof=0"], tmp_path / "run", 0, record)
    assert not learning.recorded([*base, "rl.algo=grpo"], tmp_path / "run", 0, record)
    assert learning._config_key(cfg("rl.algo=grpo"))["rl"]["credit"] == {"ddof": 1}
    assert learning.same_config(learning._config_key(cfg("rl.algo=gigpo")), learning._config_key(cfg("rl.algo=gigpo")))
    assert "ddof" not in learning._config_key(cfg("rl.algo=gigpo"))["rl"]["credit"]


def test_benchmarks_are_a_package_and_no_tracked_file_is_over_1_mb():
    """``python -m benchmarks.X`` needs no path edits, and large binaries (model weights) stay out of git: the
    records keep their sha256 and docs/benchmarks.md says how to rebuild them."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    for script in (root / "benchmarks").glob("*.py"):
        text = script.read_text(encoding="utf-8")
        assert "sys.path.insert" not in text and "noqa: E402" not in text, script.name
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True)
    if listed.returncode:
        pytest.skip("not a git checkout")
    sizes = {name: (root / name).stat().st_size for name in listed.stdout.split("\0") if (root / name).is_file()}
    assert not {name: size for name, size in sizes.items() if size > 1_000_000}


def test_lm_race_trains_each_arm_on_its_seeds_pool_and_scores_the_pool_curve(tmp_path, monkeypatch, tiny_model_dir):
    """``lm_race --jobs 2``: each (arm, seed) run trains on that seed's pool (``env.train_pool`` validation seeds
    from the seed's offset) and plays it greedily; the summary scores each run's pool curve as the tabular race does;
    pilot seeds and reported seeds never mix."""
    import json
    import sys

    from benchmarks import lm_race
    from creditflow.auditing.race import curve_summary

    out, work = tmp_path / "race", tmp_path / "runs"
    argv = [lm_race.__file__, "--smoke", "--jobs", "2", "--model", str(tiny_model_dir), "--seeds", "3",
            "--methods", "grpo", "rewardflow", "--out", str(out), "--work", str(work), "--shared", "nothing"]
    monkeypatch.setattr(sys, "argv", argv)
    lm_race.main()
    result = json.loads(out.with_suffix(".json").read_text())
    assert sorted(result["runs"]) == ["grpo", "rewardflow"] and result["settings"]["pool"] == 2
    for arm in ("grpo", "rewardflow"):
        stored = json.loads((tmp_path / "race_runs" / f"{arm}_s3.json").read_text())
        env = stored["config"]["env"]
        assert (env["train_pool"], env["eval_seed_offset"]) == (2, lm_race.pool_offset(3)) == (2, 1_103_000)
        assert stored["config"]["rl"]["eval_episodes"] == 2 and stored["machine"]["shared"] == "nothing"
        curve = stored["record"]["curves"]["eval/success_rate"]
        assert [s for s, _ in curve] == [0, 1, 2]
        assert result["summary"][arm]["auc"]["values"] == [curve_summary(curve)["auc"]]
    for argv_seeds, flag, message in ((["100"], [], "pilot's"), (["0"], ["--pilot"], "tuning seeds only")):
        monkeypatch.setattr(sys, "argv", [lm_race.__file__, "--model", str(tiny_model_dir), "--seeds", *argv_seeds,
                                          "--work", str(work), *flag])
        with pytest.raises(SystemExit, match=message):
            lm_race.main()


def test_the_report_pages_the_lm_race_settings_and_arms_the_benchmark_runs():
    from benchmarks import lm_race, report

    assert set(report.LM_RACES) <= set(lm_race.SETTINGS) and set(report.PREDICTIONS) == set(report.LM_RACES)
    assert tuple(report.LM_RACE_ARMS) == tuple(lm_race.DEFAULT_METHODS)
    assert all(report.LM_RACES[s] == lm_race.SETTINGS[s]["title"] for s in report.LM_RACES)
    pools = [set(lm_race.pool_seeds(s, 16)) for s in (*lm_race.SEEDS, lm_race.PILOT_FROM, lm_race.PILOT_FROM + 1)]
    assert all(not a & b for i, a in enumerate(pools) for b in pools[i + 1:])  # seeds' pools are disjoint
    assert min(min(p) for p in pools) > 1_000_000 + 512 and max(max(p) for p in pools) < 2_000_000


def test_step_perf_counts_cpu_attention_and_its_causal_triangle():
    """step_cost --setting lean's FLOPs: torch's CPU attention kernel (which torch's counter skips), forward and
    backward, a causal call as its lower triangle; the resumable progress keeps a finished unit."""
    import torch.nn.functional as F

    from benchmarks import step_perf

    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    full, split = step_perf.flops(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward(), split=True)
    assert full == 3 * 4 * 2 * 4 * 16 * 16 * 8 and set(split) == {"_scaled_dot_product_flash_attention_for_cpu",
                                                               "_scaled_dot_product_flash_attention_for_cpu_backward"}
    causal = step_perf.flops(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward())
    assert causal == pytest.approx(full * 17 / 32, rel=1e-6)


def test_step_cost_progress_resumes_finished_units(tmp_path):
    from benchmarks.step_cost import Progress

    path, calls = tmp_path / "progress.json", []
    first = Progress(path, fresh=False)("unit", lambda: calls.append(1) or {"x": 1.0})
    again = Progress(path, fresh=False)("unit", lambda: calls.append(2) or {"x": 2.0})
    assert first == again and first["x"] == 1.0 and calls == [1] and "loadavg_before" in first
    assert Progress(path, fresh=True)("unit", lambda: {"x": 3.0})["x"] == 3.0


def test_credit_audit_refuses_to_extend_records_made_under_other_settings(tmp_path, monkeypatch, capsys):
    """A records file whose M, subsample or model differs from the settings now is another experiment: its seeds
    must not be skipped as done nor mixed with new ones (exit 2, one line, nothing written); the thread count is
    free."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, os.environ.get(var, "1"))  # the module's import sets them for its own process
    from benchmarks import credit_audit

    path = tmp_path / "accuracy_modelpi_sft.json"
    head = {"policy": "model=pi_sft", "m": 16, "subsample": 40, "threads": "1"}
    credit_audit.store(path, head, "seeds", "0", {"x": 0})
    credit_audit.store(path, {**head, "threads": "2"}, "seeds", "1", {"x": 1})
    assert sorted(json.loads(path.read_text())["seeds"]) == ["0", "1"]
    kept = path.read_bytes()
    for changed in ({"subsample": 80}, {"m": 32}):
        with pytest.raises(SystemExit) as stop:
            credit_audit.store(path, {**head, **changed}, "seeds", "2", {"x": 2})
        assert stop.value.code == 2
        err = capsys.readouterr().err
        key, value = next(iter(changed.items()))
        assert err.count("\n") == 1 and f"{key} {head[key]!r} (settings now: {value!r})" in err
        assert path.read_bytes() == kept
        with pytest.raises(SystemExit):
            credit_audit.check_head(path, {**head, **changed})
        capsys.readouterr()


def test_credit_audit_household_audits_a_subsample_under_the_fair_policies_only(monkeypatch):
    """Household's issue-85 policies run at M 16 on a random 64 steps a seed (32 triples in the bias part); the
    ε-expert's records keep every step at M 8 (their committed files), and the pilot's settings are the real
    ones' but for tasks and seeds."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    from benchmarks import credit_audit

    spec = credit_audit.SETTINGS["household"]
    plain, fair = credit_audit.audit_settings(spec), credit_audit.audit_settings(spec, fair=True)
    assert (plain.m, plain.subsample, plain.bias_subsample) == (8, None, 32)  # no ε-expert bias record predates it
    assert (fair.m, fair.subsample, fair.bias_subsample) == (16, 64, 32)
    pilot = credit_audit.audit_settings(spec, pilot=True, fair=True)
    assert (pilot.m, pilot.subsample, pilot.seeds) == (16, 64, 2) and pilot.task_offset != fair.task_offset
    six = credit_audit.audit_settings(credit_audit.SETTINGS["sokoban6"], fair=True)
    assert six.subsample is None and six.bias_subsample is None  # Sokoban's fair policies audit every step
    assert spec["fair_seeds"] == {"uniform": 40, "tabular=0.2": 40} and "fair_seeds" not in credit_audit.SETTINGS["sokoban6"]

def test_credit_audit_runs_more_accuracy_seeds_only_under_the_policies_fair_seeds_names(tmp_path, monkeypatch):
    """Household's uniform policy resolved 27 steps in 20 seeds (the snapshot at 20% 45): its accuracy part runs
    40; every other policy (and the ε-expert's committed records) keeps the setting's 20."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    from benchmarks import credit_audit

    ran: dict = {}

    def fake_seed(sim, pol, seed, st, want):
        ran.setdefault(pol.label if hasattr(pol, "label") else str(pol), []).append(seed)
        return {"seed": seed, "seconds": 0.0, "accuracy": {"arms": {}}}

    monkeypatch.setattr(credit_audit, "accuracy_seed", fake_seed)
    monkeypatch.setattr(credit_audit, "make_sim", lambda spec: None)
    monkeypatch.setattr(credit_audit, "runs_dir", lambda name, pilot: tmp_path)
    monkeypatch.setattr(credit_audit, "arms", lambda **kw: [])
    monkeypatch.setattr(credit_audit, "summarize", lambda *a, **kw: tmp_path / "summary.json")
    credit_audit.run_setting("household", ["accuracy"], False, only=["uniform", "eps=0.9", "detour=1,eps=0.5"])
    seeds = {label: json.loads((tmp_path / f"accuracy_{credit_audit.label_file(label)}.json").read_text())["seeds"]
             for label in ("uniform", "eps=0.9", "detour=1,eps=0.5")}
    assert sorted(map(int, seeds["uniform"])) == list(range(40))
    assert sorted(map(int, seeds["eps=0.9"])) == sorted(map(int, seeds["detour=1,eps=0.5"])) == list(range(20))


def test_decode_floor_splits_a_decode_step_by_operation_and_counts_the_linear_arithmetic(tiny_model_dir):
    """decode_floor: the profiled decode steps (17 tokens minus 1, here 4 minus 1) run every linear layer and the
    LM head once per step as one mm/addmm each, every operation lands in one category, and the linear GFLOP per
    step is 2 x rows x the linear weights, hand-counted from the config."""
    from benchmarks import decode_floor, step_perf
    from creditflow.policy.load import load_policy

    model, tok = load_policy(tiny_model_dir, "cpu")
    c = model.config
    ids = tok("box on the left", add_special_tokens=False)["input_ids"]
    prompts = [ids + [5, 6, 7]] * 3 + [ids + [8, 9]] * 3  # 2 distinct prompts, 3 rows each
    for name, backend in step_perf.backends(model, tok).items():
        ops = decode_floor.op_split(backend, prompts, backend._prefill_distinct(prompts), steps=3)
        linear_calls = sum(ops.get(k, {}).get("calls_per_step", 0) for k in ("aten::mm", "aten::addmm"))
        # transformers: q, k, v, o, gate, up, down per layer; lean: q/k/v fused, o, gate/up fused, down; + LM head
        assert linear_calls == (7 if name == "hf" else 4) * c.num_hidden_layers + 1, name
        split = decode_floor.categorise(ops)
        assert sum(split.values()) == pytest.approx(sum(v["ms_per_step"] for v in ops.values()))
        assert split["matrix products"] > 0 and split["the draw"] > 0
    h, kv = c.hidden_size, c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
    per_layer = h * h + 2 * h * kv + h * h + 3 * h * c.intermediate_size
    assert decode_floor.matrix_product_gflop(model, 6) == pytest.approx(
        2 * 6 * (c.num_hidden_layers * per_layer + c.vocab_size * h) / 1e9)


def test_decode_floor_smollm2_parts_measure_the_bf16_copy_against_the_float32_model(tiny_model_dir):
    """decode_floor --smollm2's parts on the tiny policy: the four paths' decode timings with their ratios over
    hf; the linear pass reads every linear weight once (float32 bytes, then half in bf16); the float32 lean path's
    log-probs are the float32 model's (gap at float rounding) while the bf16 copy's are not."""
    from benchmarks import decode_floor, step_perf
    from creditflow.policy.load import load_policy

    model, tok = load_policy(tiny_model_dir, "cpu")
    ids = tok("box on the left", add_special_tokens=False)["input_ids"]
    prompts = [ids + [5, 6, 7], ids + [8, 9]]
    timing = step_perf.decode_cost(model, tok, prompts, repeats=1, steps=2, bf16_copy=True)
    assert set(timing["over_hf"]) == set(decode_floor.SMOL_PATHS)
    assert timing["over_hf"]["hf"] == {"wall": 1.0, "cpu": 1.0}
    size = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert decode_floor.linear_pass(model, torch.float32, repeats=1)["mb"] == pytest.approx(4 * size / 1e6)
    assert decode_floor.linear_pass(model, torch.bfloat16, repeats=1)["mb"] == pytest.approx(2 * size / 1e6)
    effects = decode_floor.copy_effects(model, tok, prompts, tokens=4)
    assert effects["lean"]["logprob_gap_mean"] < 1e-4 < effects["lean+bf16"]["logprob_gap_mean"]
    assert 0 <= effects["greedy_equal_share"] <= 1 and effects["prompts"] == 2


def test_credit_audit_never_mixes_menus_or_lm_records_from_other_weights(tmp_path, monkeypatch, capsys):
    """A π_SFT rebuilt on another host has other weights. The parts that sample free-text menus from it refuse to
    extend records whose menus came from the first build (exit 2, one line, nothing written); the LM part runs,
    its records' head names the weights it sampled from, and the summary keeps naming each part's own weights."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    from benchmarks import credit_audit

    first, rebuilt = "a" * 64, "b" * 64
    summary = tmp_path / "credit_audit_webshop.json"
    summary.write_text(json.dumps({"machine": {"cpu": "x"}, "menu": {"sha256": first}}))
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "accuracy_modelpi_sft.json").write_text(json.dumps({"policy": "model=pi_sft", "sha256": rebuilt,
                                                                         "seeds": {}}))
    monkeypatch.setattr(credit_audit, "summary_path", lambda name, pilot: summary)
    monkeypatch.setattr(credit_audit, "runs_dir", lambda name, pilot: runs)
    monkeypatch.setattr(credit_audit, "require_weights", lambda *a: None)
    monkeypatch.setattr(credit_audit, "weights_sha256", lambda model: rebuilt)
    spec = credit_audit.SETTINGS["webshop"]
    kept = summary.read_bytes()
    for part in ("coverage", "accuracy", "rro"):
        with pytest.raises(SystemExit) as stop:
            credit_audit.check_menu("webshop", spec, [part], False)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.count("\n") == 1 and rebuilt[:12] in err and first[:12] in err
    assert summary.read_bytes() == kept
    credit_audit.check_menu("webshop", spec, ["lm"], False)  # the LM part samples no menus: it runs
    credit_audit.summarize("webshop", credit_audit.audit_settings(spec), 0.0)
    out = json.loads(summary.read_text())
    assert out["menu"]["sha256"] == first and out["lm"]["sha256"] == rebuilt
    monkeypatch.setattr(credit_audit, "weights_sha256", lambda model: first)
    credit_audit.check_menu("webshop", spec, ["accuracy"], False)  # the records' own weights: the menus may run
