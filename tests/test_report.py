"""benchmarks/report/: the committed results pages and README tables are what the records give."""

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
    for path in sorted(report.paths.NARRATIVE.glob("*.md")):
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
    shutil.copytree(report.paths.RESULTS / "credit_learning_hard_runs", records)
    for landed in records.glob("*_s*.json"):  # arms after the first three land seed by seed; this case sets its own
        if landed.stem.rsplit("_s", 1)[0] not in ("grpo", "gigpo", "rewardflow"):
            landed.unlink()
    for name in ("credit_learning_hard.json", "credit_learning_hard_diagnostics.json"):
        shutil.copy(report.paths.RESULTS / name, results / name)
    for arm, seeds in (("rewardflow_official", (0, 1, 2)), ("gigpo_official", (0, 1))):
        for seed in seeds:
            stored = json.loads((records / f"rewardflow_s{seed}.json").read_text())
            stored["record"]["final_eval_success"] = 0.05 + 0.01 * seed
            stored["record"]["sft_sha256"] = "ab" * 32
            (records / f"{arm}_s{seed}.json").write_text(json.dumps(stored))
    monkeypatch.setattr(report.paths, "RESULTS", results)
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
    monkeypatch.setattr(report.paths, "DOCS", tmp_path / "docs" / "results")
    monkeypatch.setattr(report.paths, "ROOT", tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(report.paths.README.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(report.paths, "README", readme)
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
        page = (report.paths.DOCS / check.page).read_text(encoding="utf-8")
        assert "On the training curve ([area under on-policy training success](#training-curve)" in page
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


def race_record(seed, curve, test=(0.3, 0.4), sha="aa", steps=10):
    """A minimal ``lm_race`` run record: the pool curve ``[[step, success], ...]`` and the test split around RL."""
    return {"config": {"env": {"train_pool": 16, "eval_seed_offset": 1_100_000 + 1_000 * seed}, "rl": {"steps": steps}},
            "record": {"seed": seed, "curves": {"eval/success_rate": curve,
                                                "test/success_rate": [[0, test[0]], [steps, test[1]]]},
                       "mean_train_success": 0.5, "rl_minutes": 1.0, "sft_sha256": sha * 32}}


def write_race(results, setting, runs, threshold=0.5):
    folder = results / f"lm_race_{setting}_runs"
    folder.mkdir(parents=True, exist_ok=True)
    for (arm, seed), stored in runs.items():
        (folder / f"{arm}_s{seed}.json").write_text(json.dumps(stored))
    settings = {"setting": setting, "title": "T", "env": ["env.name=sokoban"], "steps": 10, "B": 4, "G": 8, "pool": 16,
                "eval_every": 5, "threshold": threshold, "test_levels": 8, "pool_base": 1_100_000, "pool_stride": 1_000,
                "overrides": [], "model": "m"}
    (results / f"lm_race_{setting}.json").write_text(json.dumps({"settings": settings}))


def test_lm_race_pages_say_not_run_yet_then_score_the_pool_curves_as_the_tabular_race(tmp_path, monkeypatch):
    monkeypatch.setattr(report.paths, "RESULTS", tmp_path)
    races = report.load_lm_races()
    assert [r.setting for r in races] == list(report.LM_RACES) and not any(r.runs for r in races)
    assert "**Not run yet**" in report.lm_race_page(races[0])
    runs = {}
    for seed in range(4):
        runs[("grpo", seed)] = race_record(seed, [[0, 0.4], [5, 0.4], [10, 0.5]])
        runs[("gigpo", seed)] = race_record(seed, [[0, 0.4], [5, 0.5], [10, 0.5 + 0.01 * seed]])
        runs[("rewardflow", seed)] = race_record(seed, [[0, 0.4], [5, 0.6 + 0.01 * seed], [10, 0.8]], test=(0.3, 0.2),
                                                 sha="bb" if seed == 3 else "aa")  # seed 3: another π_SFT
    write_race(tmp_path, "demo", runs)
    race = next(r for r in report.load_lm_races() if r.setting == "demo")
    assert race.arms == ["grpo", "gigpo", "rewardflow"]
    rf = race.pair("rewardflow", "gigpo")
    assert rf.seeds == [0, 1, 2] and rf.diffs == pytest.approx([0.2, 0.2, 0.2])  # AUC: mean of the points after 0
    (label, verdict, _), = race.verdicts("auc")
    assert (label, verdict) == ("", "yes")
    assert race.verdicts("test_final")[0][1] == "reversed"  # on new levels RewardFlow ends below GRPO on every seed
    assert [r.extra["reached_at"] for r in race.runs if r.arm == "rewardflow"] == [5, 5, 5, 5]
    page = report.lm_race_page(race)
    assert "**Not run yet**" not in page and "| RewardFlow | 4 |" in page and "1,100,000–1,100,015" in page
    runs[("grpo", 0)] = race_record(0, [[0, 0.4], [20, 0.5]], steps=20)  # a run of another budget
    write_race(tmp_path, "demo", runs)
    with pytest.raises(SystemExit, match="mixes budgets"):
        report.load_lm_races()


def test_readme_results_are_one_short_row_per_claim_and_one_column_per_level_of_evidence():
    text = report.paths.README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    begin, end = report.paths.MARKERS["results"]
    block = text[text.index(begin):text.index(end)]
    rows = [line for line in block.splitlines() if line.startswith("| ")]
    assert rows[0] == "| claim | " + " | ".join(report.EVIDENCE.values()) + " |"
    assert [r.split(" | ")[0][2:] for r in rows[1:]] == [claim for claim, _ in report.CLAIM_ROWS]
    for target in re.findall(r"\]\((docs/results/[^)#]+)", block):  # every cell links to a page that exists
        assert (report.paths.ROOT / target).is_file(), target
    pool_cell = rows[1].split(" | ")[1 + list(report.EVIDENCE).index("pool")]
    demo_run = bool(list(report.paths.RESULTS.glob("lm_race_demo_runs/*.json")))
    if not demo_run:  # no LM race record yet: the cell says so
        assert pool_cell == "[2 not run yet](docs/results/index.md#by-claim-and-level-of-evidence)"
    for row in rows[1:]:  # a cell counts its verdicts; the full lists are in docs/results/index.md
        assert all(len(cell) < 200 for cell in row.split(" | ")[1:]), row
    index = (report.paths.DOCS / "index.md").read_text(encoding="utf-8")
    assert "## By claim and level of evidence" in index
    assert ("**not run yet**: [6×6](lm-race-demo.md)" in index) is not demo_run  # once it runs, a verdict


def test_claims_cells_group_settings_by_verdict_and_name_what_does_not_measure_a_claim(tmp_path, monkeypatch):
    monkeypatch.setattr(report.paths, "RESULTS", tmp_path)
    spec = report.Spec("x", "learning", "X", "setting", "credit", report.CREDIT_CLAIM)
    good = [curve_run(arm, s, v + 0.01 * s, v + 0.011 * s) for s in range(5)
            for arm, v in (("grpo", 0.1), ("gigpo", 0.2), ("rewardflow", 0.3))]
    check = report.Check(spec, {}, good, ["grpo", "gigpo", "rewardflow"], [0, 1, 2, 3, 4])
    races = report.load_lm_races()  # none run
    credit = report.CLAIM_ROWS[0][1]
    assert report.claim_entries(credit, "new", [check], [], races, "") == [("yes", "[x](x.md)")]
    assert report.claim_entries(credit, "curve", [check], [], races, "") == [("yes", "[x](x.md#training-curve)")]
    assert report.claim_cell(report.claim_entries(credit, "pool", [check], [], races, "")) == (
        "**not run yet**: [6×6](lm-race-demo.md), [7×7, 1 box](lm-race-sokoban7.md)")
    crps = dict(report.CLAIM_ROWS)["+ CRPS > + ExpReplay, + CRPS > GRPO"]
    assert report.claim_entries(crps, "pool", [check], [], races, "") == "–"
    assert report.claim_cell([("no", "[b](b.md)"), ("yes", "[a](a.md)"), ("no", "[c](c.md)")]) == (
        "**yes**: [a](a.md); **no**: [b](b.md), [c](c.md)")
    assert report.claim_cell([("no", "[b](b.md)"), ("yes", "[a](a.md)"), ("no record yet", "[c](c.md)"),
                              ("no", "[d](d.md)")], "i.md#x") == "[**yes** 1 · **no** 2 · 1 not run yet](i.md#x)"


def test_prediction_table_takes_each_column_from_its_own_level_and_says_no_record(tmp_path, monkeypatch):
    audits = {a.setting: a for a in report.load_audits()}
    checks = {c.spec.stem: c for c in (report.load_check(s) for s in report.SPECS if s.kind == "learning")}
    monkeypatch.setattr(report.paths, "RESULTS", tmp_path)
    runs = {(arm, s): race_record(s, [[0, 0.4], [5, v + 0.01 * s]]) for s in range(3)
            for arm, v in (("grpo", 0.4), ("rewardflow", 0.6))}
    write_race(tmp_path, "demo", runs)
    race = next(r for r in report.load_lm_races() if r.setting == "demo")
    sources = report.prediction_sources(race, audits, checks)
    six = audits["sokoban6"]
    assert sources["tabular"]("rewardflow", "grpo").diffs == stats.paired(six.race("rewardflow"), six.race("grpo")).diffs
    assert sources["pool"]("rewardflow", "grpo").diffs == pytest.approx([0.2, 0.2, 0.2])
    assert sources["pool"]("gigpo", "grpo") is None  # the race has no GiGPO arm
    assert sources["held_out"]("rewardflow", "grpo").diffs == checks["credit_learning_demo100"].pair(
        "rewardflow", "grpo").diffs
    # the race's own page says what the audit predicted, pair by pair, beside what the race found
    page = report.lm_race_page(race, list(audits.values()), list(checks.values()))
    section = page[page.index("## What the audit predicted"):page.index("## Per run")]
    audit_cell = report.prediction._prediction_cell(sources["lm_audit"]("rewardflow", "grpo"))
    assert f"| RewardFlow − GRPO | {audit_cell} | " in section and "| yes: +0.200 (3 of 3) |" in section
    assert "GiGPO" not in section.split("|---|")[-1]  # only the pairs the race ran
    assert "## What the audit predicted" not in report.lm_race_page(race)  # no audit records given: no section
    # an LM audit that resolves too few steps (under 50 with |Â| > 2 SE) ranks nothing, never pooled into a verdict
    few = report.Audit("sokoban6", json.loads(json.dumps(six.summary)))
    for seed in few.summary["accuracy"]["model=pi_sft"]:
        seed["accuracy"]["resolved"] = 0
    assert not few.is_resolved("model=pi_sft")
    unresolved = report.prediction_sources(race, {**audits, "sokoban6": few}, checks)
    assert unresolved["lm_audit"]("rewardflow", "grpo") is report.prediction.NOT_RESOLVED
    page = report.prediction_page([race], [*(a for a in audits.values() if a.setting != "sokoban6"), few],
                                  list(checks.values()))
    assert "| RewardFlow − GRPO | not resolved (under 50 resolved steps) |" in page and "yes: +0.200 (3 of 3)" in page
    # a resolved one is pooled with any other LM policy, seed by seed
    lm = report.Audit("sokoban6", json.loads(json.dumps(six.summary)))
    lm.summary["accuracy"]["lm:pi_sft"] = lm.summary["accuracy"]["eps=0.5"]  # a second LM policy joins the audit
    assert all(lm.is_resolved(p) for p in lm.lm_policies)
    with_lm = report.prediction_sources(race, {**audits, "sokoban6": lm}, checks)
    assert with_lm["lm_audit"]("rewardflow", "grpo").n == len(lm.accuracy("rewardflow", policies=lm.lm_policies)) >= 2


def test_a_learning_page_groups_runs_by_the_machine_their_records_keep_and_counts_those_without():
    spec = report.Spec("x", "learning", "X", "setting", "credit", report.CREDIT_CLAIM)
    block = {"cpu": "AMD EPYC", "cores": 2, "torch_threads": 1, "shared": "an audit, 1 thread", "date": "2026-12-07"}
    runs = [run("grpo", 0, 0.1), run("grpo", 1, 0.1), run("gigpo", 0, 0.2)]
    runs[0].extra["machine"] = {**block, "matmul_gflops": 40.0, "load_average_start": [2.0, 1, 1],
                                "load_average_end": [2.5, 1, 1]}
    runs[2].extra["machine"] = {**block, "matmul_gflops": 44.0}
    lines = report.run_machines_lines(report.Check(spec, {}, runs, ["grpo", "gigpo"], [0, 1]))
    assert lines == ["- Machine per run: AMD EPYC (2 cores); 1 torch thread; one large float32 matrix product at 40-44 "
                     "GFLOP/s; load average 2-2.5 at the runs' starts and ends; 2026-12-07; shared with: an audit, 1 "
                     "thread (GRPO s0, GiGPO s0).",
                     "- Machine per run: not recorded for 1 runs (made before run records kept it)."]
    assert report.run_machines_lines(report.Check(spec, {}, runs[1:2], ["grpo"], [1])) == [
        "- Machine per run: not recorded (1 runs, made before run records kept their machine)."]


def _audit_seed(seed, resolved, spearman):
    return {"seed": seed, "success": 0.5, "accuracy": {"steps": 100, "resolved": resolved, "arms": {
        arm: {"spearman": value + 0.001 * seed} for arm, value in spearman.items()}}}


def test_audit_verdicts_are_per_behaviour_policy_with_not_resolved_and_no_record_yet_cells():
    """Issue 85: one verdict per (setting, behaviour policy), never pooled; a policy with fewer than 50 resolved
    steps is "not resolved"; a policy the benchmark runs without a record is "no record yet"; the race at each arm's
    own tuned rate and at the common one, beside the earlier shared-pool race."""
    good = {"grpo": 0.2, "gigpo": 0.3, "rewardflow": 0.4}
    summary = {"title": "T", "env": "sokoban", "options": {}, "parts": ["coverage", "accuracy", "race"],
               "settings": {"race_lr": 1.0, "race_lrs": [0.3, 1.0], "seeds": 6, "tasks": 4, "group_size": 8, "m": 32,
                            "race_pool": 8, "race_offset": 100000, "race_seeds": 6, "race_groups": 4,
                            "race_episodes": 64, "race_epochs": 2, "race_tune_seeds": 2, "race_eval_every": 2},
               "accuracy": {"eps=0.5": [_audit_seed(s, 20, good) for s in range(6)],
                            "uniform": [_audit_seed(s, 3, good) for s in range(6)]},
               "race": {}, "rro": {}, "records": "x/",
               "race_fresh": {arm: [{"seed": s, "lr": lr, "auc": v * lr + 0.01 * s, "final": 0.5,
                                     "episodes_to_half": None} for lr in (0.3, 1.0) for s in range(6)]
                              for arm, v in (("grpo", 0.5), ("gigpo", 0.4), ("rewardflow", 0.3))},
               "race_tuning": {}, "race_rates": {"grpo": 0.3, "gigpo": 1.0, "rewardflow": 1.0}}
    a = report.Audit("sokoban6", summary)
    assert a.missing_kinds == ["detour", "tabular", "lm"]
    credit = report.CLAIM_ROWS[0][1]
    entries = report.claim_entries(credit, "audit", [], [a], [], "")
    assert ("yes", "[6×6, ε-expert 0.5](credit-audit-sokoban6.md)") in entries
    assert ("not resolved", "[6×6, uniform](credit-audit-sokoban6.md)") in entries
    assert ("no record yet", "[6×6, detour](credit-audit-sokoban6.md)") in entries
    # own rates: GRPO at 0.3 (AUC 0.15), GiGPO and RewardFlow at 1 (0.4, 0.3): RewardFlow below GiGPO
    assert a.race("grpo", rate="own") == {s: pytest.approx(0.15 + 0.01 * s) for s in range(6)}
    race = report.claim_entries(credit, "tabular", [], [a], [], "")
    assert race[0][0] == "reversed" and "own rates" in race[0][1] and "common rate 1" in race[1][1]
    # the race lands arm by arm: a claim on an arm still to run says so, never drops out of the table silently
    assert "g2po" in a.fresh_missing and "grpo" not in a.fresh_missing
    assert not any(v == "not run yet" for v, _ in race)
    g2po = report.claim_entries(report.CLAIM_ROWS[2][1], "tabular", [], [a], [], "")
    assert g2po == [("not run yet", "[6×6, fresh pools, tuned rates](credit-audit-sokoban6.md#learning-race)")]
    page = report.audit_page(a)
    assert "Not run yet on fresh pools: G2PO" in page
    assert "- uniform (" in page and "**not resolved** (18 steps" in page and "- detour expert (" in page
    assert "no record yet" in page and "### At each arm's own rate" in page
    block = "\n".join(report.audit_readme_lines([a], ""))
    assert "ε-expert 0.5 **yes**" in block and "uniform **not resolved**" in block and "π_SFT **no record yet**" in block


def test_the_bias_section_says_how_many_triples_a_subsample_audited():
    from benchmarks.report.audit_sections import bias_section

    arms = {arm: {"pearson": 0.5, "spearman": 0.4, "noise_share": 0.3} for arm in ("grpo", "rewardflow")}
    seed = lambda s, **kw: {"seed": s, "rounds": 8, "triples": 32, "resolved": 5, "arms": arms, **kw}  # noqa: E731
    summary = {"title": "T", "env": "household", "options": {}, "parts": ["bias"], "settings": {}, "records": "x/",
               "accuracy": {}, "bias": {"uniform": [seed(0, triples_seen=700), seed(1, triples_seen=650)],
                                        "eps=0.5": [seed(0), seed(1)],
                                        "eps=0.75": [seed(0, resolved=25), seed(1, resolved=25)]}}
    text = "\n".join(bias_section(report.Audit("household", summary)))
    assert "2 seeds × 8 groups of each task; 1350 (task, state, action) seen in two groups or more, of which 64 " \
           "audited (a random subsample per seed), 10 with |A^π| > 2 SE, under the 50 a verdict needs" in text
    assert "2 seeds × 8 groups of each task; 64 (task, state, action) seen in two groups or more, 10 with" in text
    # a policy whose triples resolve 50 steps or more reads plainly; the two under it say they are not resolved
    assert "64 (task, state, action) seen in two groups or more, 50 with |A^π| > 2 SE.\n" in text
    assert text.count("(not resolved).") == 2


def test_lm_race_pilot_section_says_whether_reported_seeds_have_run(tmp_path, monkeypatch):
    monkeypatch.setattr(report.paths, "RESULTS", tmp_path)
    pilot = tmp_path / "lm_race_demo_pilot_runs"
    pilot.mkdir()
    (pilot / "grpo_s100.json").write_text(json.dumps(race_record(100, [[0, 0.4], [5, 0.5], [10, 0.6]])))
    race = next(r for r in report.load_lm_races() if r.setting == "demo")
    page = report.lm_race_page(race)
    assert len(race.pilot) == 1 and not race.runs
    assert "settings are fixed from them before any reported seed runs" in page and "were fixed" not in page
    write_race(tmp_path, "demo", {("grpo", 0): race_record(0, [[0, 0.4], [5, 0.5], [10, 0.6]])})
    page = report.lm_race_page(next(r for r in report.load_lm_races() if r.setting == "demo"))
    assert "The settings above were fixed from them before the reported seeds ran." in page


def test_lm_race_in_progress_shows_its_runs_and_draws_no_verdict_until_its_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(report.paths, "RESULTS", tmp_path)
    runs = {(arm, s): race_record(s, [[0, 0.4], [5, v + 0.01 * s]]) for s in range(3)
            for arm, v in (("grpo", 0.4), ("gigpo", 0.5), ("rewardflow", 0.6))}
    write_race(tmp_path, "demo", runs)
    (tmp_path / "lm_race_demo.json").unlink()  # the invocation has not ended: records, no summary
    race = next(r for r in report.load_lm_races() if r.setting == "demo")
    assert race.in_progress and [v for _, v, _ in race.verdicts("auc")] == ["in progress"]
    page = report.lm_race_page(race)
    assert "**In progress**: 9 runs recorded (GRPO 3 seeds, GiGPO 3 seeds, RewardFlow 3 seeds)" in page
    assert "| RewardFlow | 3 |" in page  # the runs so far are shown
    credit = report.CLAIM_ROWS[0][1]
    assert report.claim_entries(credit, "pool", [], [], [race], "") == [("in progress", "[6×6](lm-race-demo.md)")]
    assert report.prediction_sources(race, {}, {})["pool"]("rewardflow", "grpo") is report.races.IN_PROGRESS
    # the summary of an invocation that covered seeds 0-1 only: seed 2 ran after it, still in progress
    write_race(tmp_path, "demo", runs)
    summary = json.loads((tmp_path / "lm_race_demo.json").read_text())
    summary["settings"]["seeds"] = [0, 1]
    (tmp_path / "lm_race_demo.json").write_text(json.dumps(summary))
    assert next(r for r in report.load_lm_races() if r.setting == "demo").in_progress
    summary["settings"]["seeds"] = [0, 1, 2]  # it ended over every recorded seed: verdicts
    (tmp_path / "lm_race_demo.json").write_text(json.dumps(summary))
    race = next(r for r in report.load_lm_races() if r.setting == "demo")
    assert not race.in_progress and race.verdicts("auc")[0][1] == "yes"


def test_only_an_lm_policys_accuracy_record_counts_as_an_lm_run(tmp_path):
    """Household's uniform policy audits a subsample too; only a record that names a model is an LM run."""
    from benchmarks.audit_records import per_seed

    seed = {"seed": 0, "accuracy": {"steps": 10, "audited": 4, "resolved": 1, "arms": {}}}
    (tmp_path / "accuracy_uniform.json").write_text(json.dumps(
        {"policy": "uniform", "m": 16, "subsample": 64, "seeds": {"0": seed}}))
    (tmp_path / "accuracy_modelpi_sft.json").write_text(json.dumps(
        {"policy": "model=pi_sft", "m": 16, "subsample": 30, "model": "runs/x/sft_model", "seeds": {"0": seed}}))
    out = per_seed(tmp_path)
    assert set(out["accuracy"]) == {"uniform", "model=pi_sft"}
    assert out["lm_runs"] == {"model=pi_sft": {"m": 16, "subsample": 30, "model": "runs/x/sft_model"}}
