"""benchmarks/report.py: the committed results pages and README tables are what the records give."""

import json
import re
import shutil
from pathlib import Path

import pytest

from benchmarks import report, stats


def test_committed_results_pages_and_readme_tables_are_generated_from_the_records():
    stale = report.stale(report.generate())
    assert not stale, ("generated results differ from the committed files; run `python -m benchmarks.report`: "
                       + ", ".join(stale))


def test_narratives_take_every_measured_number_from_the_records():
    """Outside template expressions a narrative holds no decimal with two or more places and no percentage: those
    come from ``{{ ... }}`` over the records (settings such as '100 steps' or 'Eq. 4' are fine)."""
    for path in sorted(report.NARRATIVE.glob("*.md")):
        text = re.sub(r"\{\{.*?\}\}|\{%.*?%\}", " ", path.read_text(encoding="utf-8"), flags=re.S)
        typed = re.findall(r"(?<![\w.])[+−-]?\d*\.\d{2,}|\d+(?:\.\d+)?%", text)
        assert not typed, f"{path.name} types measured numbers: {typed}"


def test_summaries_recompute_from_their_records():
    """Every learning check's per-arm bootstrap interval, recomputed from its runs, is the one in its summary."""
    for spec in report.SPECS:
        if spec.kind != "learning":
            continue
        check = report.load_check(spec)
        for arm, summary in check.summary["summary"].items():
            ours = check.arm(arm)
            assert ours.values == pytest.approx(summary["final_eval_success"]["values"]), (spec.stem, arm)
            if summary["final_eval_success"].get("ci95") is not None:  # summaries from before intervals: mean ± std
                assert ours.boot == summary["final_eval_success"]["ci95"], (spec.stem, arm)
            assert stats.mean_sd(ours.values, ddof=0) == pytest.approx(
                (summary["final_eval_success"]["mean"], summary["final_eval_success"]["std"])), (spec.stem, arm)


def run(arm, seed, value, sft=0.4, sha=None):
    return report.Run(arm, seed, value, sft, sha, "benchmarks/results/x_runs/")


def test_partial_arms_pair_on_shared_seeds_and_say_how_many_they_have():
    spec = report.Spec("x", "learning", "X", "setting", "credit", report.CREDIT_CLAIM)
    runs = [run("grpo", s, 0.30 + 0.01 * s) for s in range(5)] + [run("gigpo", s, 0.40 + 0.01 * s) for s in range(5)]
    runs += [run("rewardflow", s, 0.50 + 0.02 * s) for s in range(3)]  # 3 of 5 seeds so far
    check = report.Check(spec, {}, runs, ["grpo", "gigpo", "rewardflow"], [0, 1, 2, 3, 4])
    assert check.coverage("rewardflow") == "3 of 5 seeds" and check.coverage("grpo") == ""
    p = check.pair("rewardflow", "gigpo")
    assert p.seeds == [0, 1, 2] and p.diffs == pytest.approx([0.10, 0.11, 0.12])
    (label, verdict, pairs), = check.verdicts()
    assert verdict == "yes" and [(a, b) for a, b, _ in pairs] == report.CREDIT_CLAIM
    row = report.results_table([check], "docs/results/")[2]
    assert "RewardFlow 0.520" in row and "(3 of 5 seeds)" in row and "| yes |" in row


def test_runs_of_different_pi_sft_weights_are_not_paired():
    spec = report.Spec("x", "learning", "X", "setting", "credit", [("gigpo", "grpo")])
    runs = [run("grpo", 0, 0.1, sha="aa"), run("grpo", 1, 0.1, sha="aa"), run("grpo", 2, 0.1, sha="aa"),
            run("gigpo", 0, 0.2, sha="aa"), run("gigpo", 1, 0.2, sha="bb"), run("gigpo", 2, 0.3, sha="aa")]
    check = report.Check(spec, {}, runs, ["grpo", "gigpo"], [0, 1, 2])
    assert check.pair("gigpo", "grpo").seeds == [0, 2]
    assert check.mismatched_sft("gigpo", "grpo") == [1]
    assert check.sft_identity().startswith("2 different weights")
    old = report.Check(spec, {}, [run("grpo", 0, 0.1), run("gigpo", 0, 0.2)], ["grpo", "gigpo"], [0])
    assert old.sft_identity() == "not recorded (every run's π_SFT scores 0.400 held-out)"


def test_a_new_arm_landing_seed_by_seed_shows_up_on_the_page_and_in_the_table(tmp_path, monkeypatch):
    """The lead's case: ``<arm>_s<seed>.json`` records of new arms join a finished check's records before its
    summary is rewritten; the check then shows them with the seeds they have and pairs them with the others."""
    results = tmp_path / "benchmarks" / "results"
    records = results / "credit_learning_hard_runs"
    shutil.copytree(report.RESULTS / "credit_learning_hard_runs", records)
    for landed in records.glob("*_s*.json"):  # arms after the first three land seed by seed; this case sets its own
        if landed.stem.rsplit("_s", 1)[0] not in ("grpo", "gigpo", "rewardflow"):
            landed.unlink()
    for name in ("credit_learning_hard.json", "credit_learning_hard_diagnostics.json"):
        shutil.copy(report.RESULTS / name, results / name)
    for arm, seeds in (("rewardflow_official", (0, 1, 2)), ("gigpo_official", (0, 1))):
        for seed in seeds:
            stored = json.loads((records / f"rewardflow_s{seed}.json").read_text())
            stored["record"]["final_eval_success"] = 0.05 + 0.01 * seed
            stored["record"]["sft_sha256"] = "ab" * 32
            (records / f"{arm}_s{seed}.json").write_text(json.dumps(stored))
    monkeypatch.setattr(report, "RESULTS", results)
    spec = next(s for s in report.SPECS if s.stem == "credit_learning_hard")
    check = report.load_check(spec)
    assert check.arms[-2:] == ["rewardflow_official", "gigpo_official"]
    assert check.coverage("gigpo_official") == "2 of 5 seeds"
    labels = [label for label, _, _ in check.verdicts()]
    assert labels == ["", "official preset"]
    page, _ = report.page(check, {"checks": {}, "load": lambda f: json.loads((results / f).read_text()),
                                  "stats": stats, "paper": report.PAPER, "goals": report.GOALS, "math": __import__("math")})
    assert "| RewardFlow (official preset) | 3 of 5 |" in page
    assert "RewardFlow (official preset) − GiGPO (official preset) | 2 |" in page
    assert "15 runs not recorded" in page  # the older records carry no weights hash
    row = report.results_table([check], "")[2]
    assert "GiGPO (official preset) 0.055 [0.050, 0.060]" in row and "(2 of 5 seeds)" in row
    assert "official preset: " in row


def test_readme_tables_replace_only_what_is_between_their_markers():
    text = "intro\n<!-- results:begin -->\nold\n<!-- results:end -->\nafter\n"
    assert report.replace_block(text, "results", ["new", "rows"]) == (
        "intro\n<!-- results:begin -->\nnew\nrows\n<!-- results:end -->\nafter\n")
    with pytest.raises(SystemExit, match="markers"):
        report.replace_block("no markers", "results", [])


def test_check_mode_names_what_is_out_of_date(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(report, "DOCS", tmp_path / "docs" / "results")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(report.README.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(report, "README", readme)
    monkeypatch.setattr("sys.argv", ["report.py", "--check"])
    assert report.main() == 1
    assert "out of date: docs/results/index.md" in capsys.readouterr().err
    monkeypatch.setattr("sys.argv", ["report.py"])
    assert report.main() == 0
    monkeypatch.setattr("sys.argv", ["report.py", "--check"])
    assert report.main() == 0
    assert Path(tmp_path / "docs" / "results" / "img" / "credit_learning_hard.png").exists()


def curve_run(arm, seed, value, train):
    """A learning run whose on-policy training success is ``train`` at every step (step 0 is π_SFT's evaluation)."""
    r = run(arm, seed, value)
    r.extra = {"curves": {"train/success_rate": [[s, train] for s in (1, 2, 3)], "eval/success_rate": [[0, 0.4]]}}
    return r


def test_training_curve_area_is_the_mean_on_policy_training_success_of_every_committed_run():
    """Every learning record's area under its training curve is the mean of ``train/success_rate`` over its RL steps,
    the ``mean_train_success`` the record keeps; every learning page shows the training-curve verdicts."""
    for spec in report.SPECS:
        if spec.kind != "learning":
            continue
        check = report.load_check(spec)
        assert check.train_curves, spec.stem
        for r in check.runs:
            assert report.train_auc(r) == pytest.approx(r.extra["mean_train_success"]), (spec.stem, r.arm, r.seed)
        page = (report.DOCS / check.page).read_text(encoding="utf-8")
        assert "On the training curve ([area under on-policy training success](#training-curve))" in page
        assert "## Training curve" in page


def test_training_curve_verdicts_pair_seed_by_seed_apart_from_the_held_out_ones():
    spec = report.Spec("x", "learning", "X", "setting", "credit", [("rewardflow", "grpo"), ("rewardflow", "sft")])
    runs = [curve_run("grpo", s, 0.40 + 0.01 * s, 0.30 + 0.02 * s) for s in range(5)]
    runs += [curve_run("rewardflow", s, 0.40 + 0.01 * s, 0.35 + 0.02 * s + 0.001 * s) for s in range(5)]
    check = report.Check(spec, {}, runs, ["grpo", "rewardflow"], [0, 1, 2, 3, 4])
    (_, held_out, _), = check.verdicts()
    assert held_out == "no"  # held-out, rewardflow − grpo is 0 on every seed
    (_, curve, pairs), = check.verdicts("train_auc")  # π_SFT has no training curve: its pair is left out
    assert curve == "yes" and [(a, b) for a, b, _ in pairs] == [("rewardflow", "grpo")]
    assert pairs[0][2].diffs == pytest.approx([0.05, 0.051, 0.052, 0.053, 0.054])
    row = report.results_table([check], "")[2]
    assert row.endswith("| yes |") and "| no (RewardFlow > GRPO: no" in row
    runs.append(curve_run("grpo+crps", 0, 0.4, 0.9))
    crps = report.Check(spec, {}, runs, ["grpo", "rewardflow", "grpo+crps"], [0, 1, 2, 3, 4])
    assert not report.curve_comparable(crps) and "Not a like-for-like measure" in "\n".join(
        report.training_curve_section(crps))
