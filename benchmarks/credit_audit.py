"""The credit audit's records (issue 71): coverage, advantage accuracy against Monte-Carlo A^π, the tabular
learning race and RRO's pairs, per setting, resumable.

    python -m benchmarks.credit_audit --setting sokoban6 [--parts coverage accuracy race rro] [--commit]
    python -m benchmarks.credit_audit --speed      # the speed benchmark -> benchmarks/results/credit_audit_speed.json
    python -m benchmarks.credit_audit --speed-from-records   # the same record from the sokoban6 run's wall times

Settings (``SETTINGS``, fixed before any run; the ε values were chosen by one thing only, that groups of the
ε-expert mix successes and failures on both Sokoban settings: success 0.86 / 0.52 / 0.35 on 6×6 and
0.67 / 0.25 / 0.08 on 7×7 at ε = 0.5 / 0.75 / 0.9, 160 episodes each; the race's learning rate, budget and
pool were set before its first run and not changed):

- ``sokoban6``: Sokoban 6×6, 1 box, 15 steps;
- ``sokoban7``: Sokoban 7×7, 2 boxes, 20 steps, plans of at least 4 (the ``hard`` setting of
  ``benchmarks/credit_learning.py``);
- ``household``: TextWorld pick-and-place, medium (all four parts; M = 8 and 32 truth continuations for RRO's
  pairs, to afford TextWorld; the race at the audit's defaults, as Sokoban's);
- ``webshop``: the generated catalog (coverage, accuracy, RRO pairs; no race: its policy is not tabular over a
  fixed action set). The search page is free text: there the ε-expert chooses among 4 queries sampled from the
  committed WebShop π_SFT (``benchmarks/results/webshop_sft_E4b/sft_model``, its compact template, H = 0) plus
  the expert's own query (``creditflow.recipes.audit.PolicyMenu``). ε = 0.25 / 0.5 / 0.75, by the same rule
  as Sokoban's: groups mix outcomes at each (success 0.56 / 0.29 / 0.05, mixed groups 0.1-0.6 on 2 seeds of
  10 tasks; at ε = 0.1 no group mixes, the expert wins a task always or never);
- ``sql``: InterCode-SQL on the generated databases (coverage and RRO pairs: the issue's scope for free-text
  actions). Every state is free text: the ε-expert chooses among 4 queries sampled from an SQL π_SFT plus the
  expert's action (the gold query, or ``submit`` once its result is there). The π_SFT is not committed (a
  tiny model is rebuilt in minutes; its sha256 is in the summary):
  ``creditflow sft --env sql --out runs/sql_sft sft.demos=512 sft.epochs=4 rollout.history_length=0``
  (H = 0: the prompt is the question and the last result, a function of the state, so a menu kept per state
  is the model's own proposal there). ε = 0.5 / 0.75 / 0.9, Sokoban's values, by the same rule: the π_SFT's
  menus hold the right query often, so groups only mix from ε = 0.5 on (success 0.94 / 0.88 / 0.81, mixed
  groups 0.25-0.75 on 2 seeds of 4 tasks; 1.0 at ε = 0.25).

Every (part, policy or arm) keeps its per-seed results in ``benchmarks/results/credit_audit_<setting>_runs/``
(``accuracy_<policy>.json``, ``race_<arm>.json``, ``rro_<policy>.json``), written after each seed, so a
stopped run continues where it was. A seed of accuracy is recomputed when an estimator arm it lacks is
registered (the same seed gives the same episodes and Monte-Carlo values, so the arms it had keep their
numbers), and a race arm without a file runs: a new estimator joins the records by re-running this script.
The summary ``credit_audit_<setting>.json`` holds the settings, the machine (``benchmarks/machine.py``) and
every per-seed result; ``benchmarks/report.py`` builds the page and the README rows from it.
Single-threaded (``OMP_NUM_THREADS=1``); ``--commit`` commits each finished file with git.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from dataclasses import asdict
from pathlib import Path

import benchmarks.one_thread  # noqa: F401 (before numpy loads: the audit runs single-threaded)
from benchmarks.cache import write_json
from benchmarks.machine import machine_info
from benchmarks.sft_models import require_weights
from creditflow import envs
from creditflow.auditing.estimators import arms
from creditflow.auditing.race import race_arms
from creditflow.auditing.run import AuditSettings, accuracy_seed, policies, race_seed, rro_seed
from creditflow.auditing.sim import Sim

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# GraphGPO's arm at the omega of the authors' run script for the env (their algorithm.gamma: Sokoban 0.8, ALFWorld
# 0.1 (household is creditflow's ALFWorld-like env), WebShop 0.2); every other arm at its defaults (issue 84)
GRAPHGPO_OMEGA = {env: {"graphgpo": {"omega": w}} for env, w in (("sokoban", 0.8), ("alfworld", 0.1), ("webshop", 0.2))}

SETTINGS = {
    "sokoban6": {"title": "Sokoban 6×6, 1 box", "env": "sokoban", "options": {},
                 "parts": ["coverage", "accuracy", "race", "rro"], "audit": {"knobs": GRAPHGPO_OMEGA["sokoban"]}},
    "sokoban7": {"title": "Sokoban 7×7, 2 boxes", "env": "sokoban",
                 "options": {"size": 7, "num_boxes": 2, "max_steps": 20, "min_plan": 4},
                 "parts": ["coverage", "accuracy", "race", "rro"], "audit": {"knobs": GRAPHGPO_OMEGA["sokoban"]}},
    "household": {"title": "household (TextWorld), medium", "env": "household",
                  "options": {"difficulty": "medium", "num_games": 400},
                  "parts": ["coverage", "accuracy", "race", "rro"],
                  "audit": {"m": 8, "rro_truth_m": 32, "knobs": GRAPHGPO_OMEGA["alfworld"]}},
    "webshop": {"title": "WebShop, generated catalog", "env": "webshop", "options": {},
                "parts": ["coverage", "accuracy", "rro"],
                "audit": {"epsilons": (0.25, 0.5, 0.75), "knobs": GRAPHGPO_OMEGA["webshop"]},
                "menu": {"model": "benchmarks/results/webshop_sft_E4b/sft_model", "size": 4,
                         "overrides": ["generation.max_new_tokens=48"]}},
    "sql": {"title": "InterCode-SQL, generated databases", "env": "sql", "options": {},
            "parts": ["coverage", "rro"], "audit": {"epsilons": (0.5, 0.75, 0.9)},
            "menu": {"model": "runs/sql_sft/sft_model", "size": 4, "overrides": ["generation.max_new_tokens=64"],
                     "build": "creditflow sft --env sql --out runs/sql_sft sft.demos=512 sft.epochs=4 "
                              "rollout.history_length=0"}},
}


def make_sim(spec: dict) -> Sim:
    """The setting's Sim; with a ``menu`` spec, free-text states choose among the model's sampled actions."""
    factory = envs.factory(spec["env"], **spec["options"])
    menu = None
    if "menu" in spec:
        from creditflow.config import build_config
        from creditflow.recipes.audit import policy_menu

        m = spec["menu"]
        require_weights(ROOT / m["model"], m.get("build"))
        cfg = build_config(None, [f"env.name={spec['env']}", *m["overrides"]])
        menu = policy_menu(cfg, ROOT / m["model"], factory, m["size"], log=lambda *_: None)
    return Sim(factory, menu=menu)


def menu_record(spec: dict) -> dict | None:
    """What the summary says of the menu model: path, sha256 of its weights, sampled actions per state."""
    if "menu" not in spec:
        return None
    import hashlib

    m = spec["menu"]
    weights = ROOT / m["model"] / "model.safetensors"
    return {**m, "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}


def label_file(label: str) -> str:
    return label.replace("=", "").replace(" ", "_").replace(",", "")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def save(path: Path, data: dict) -> None:
    write_json(path, data, sort_keys=True, newline=True)


def commit(paths: list[Path], message: str, enabled: bool) -> None:
    if not enabled:
        return
    subprocess.run(["git", "add", *map(str, paths)], cwd=ROOT, check=True)
    if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=ROOT).returncode:
        subprocess.run(["git", "commit", "-q", "-m", message], cwd=ROOT, check=True)


def run_setting(name: str, parts: list[str], do_commit: bool) -> Path:
    spec = SETTINGS[name]
    settings = AuditSettings(**spec["audit"])
    runs = RESULTS / f"credit_audit_{name}_runs"
    sim = make_sim(spec)
    pols = policies(settings)
    arm_names = [a.name for a in arms(knobs=settings.knobs)]
    t_setting = time.perf_counter()
    want = [p for p in ("coverage", "accuracy") if p in parts and p in spec["parts"]]
    if want:
        for label, pol in pols.items():
            path = runs / f"accuracy_{label_file(label)}.json"
            data = load(path) or {"policy": label, "seeds": {}}
            for seed in range(settings.seeds):
                have = data["seeds"].get(str(seed))
                if have and all(p in have for p in want) and (
                        "accuracy" not in want or set(arm_names) <= set(have["accuracy"]["arms"])):
                    continue
                data["seeds"][str(seed)] = accuracy_seed(sim, pol, seed, settings, want)
                save(path, data)
                print(f"{name} accuracy {label} seed {seed}: {data['seeds'][str(seed)]['seconds']:.1f} s", flush=True)
            commit([path], f"credit_audit {name}: accuracy records, {label}", do_commit)
    if "rro" in parts:
        for label, pol in pols.items():
            path = runs / f"rro_{label_file(label)}.json"
            data = load(path) or {"policy": label, "seeds": {}}
            for seed in range(settings.seeds):
                if str(seed) in data["seeds"]:
                    continue
                data["seeds"][str(seed)] = rro_seed(sim, pol, seed, settings)
                save(path, data)
            print(f"{name} rro {label}: done", flush=True)
            commit([path], f"credit_audit {name}: RRO pair records, {label}", do_commit)
    if "race" in parts and "race" in spec["parts"]:
        for arm in race_arms(knobs=settings.knobs):
            path = runs / f"race_{arm.name.replace('+', '_plus_')}.json"
            data = load(path) or {"arm": arm.name, "seeds": {}}
            t0 = time.perf_counter()
            for seed in range(settings.race_seeds):
                if str(seed) in data["seeds"]:
                    continue
                data["seeds"][str(seed)] = race_seed(sim, arm.name, seed, settings)
                if seed % 10 == 9:
                    save(path, data)
            save(path, data)
            print(f"{name} race {arm.name}: {time.perf_counter() - t0:.0f} s", flush=True)
            commit([path], f"credit_audit {name}: race records, {arm.name}", do_commit)
    summary = summarize(name, settings, time.perf_counter() - t_setting)
    commit([summary], f"credit_audit {name}: summary", do_commit)
    return summary


def summarize(name: str, settings: AuditSettings, seconds: float) -> Path:
    spec = SETTINGS[name]
    runs = RESULTS / f"credit_audit_{name}_runs"
    path = RESULTS / f"credit_audit_{name}.json"
    old = load(path)
    out = {"setting": name, "title": spec["title"], "env": spec["env"], "options": spec["options"],
           "parts": spec["parts"], "settings": asdict(settings),
           "machine": old.get("machine") or machine_info(), "accuracy": {}, "race": {}, "rro": {},
           "records": f"benchmarks/results/credit_audit_{name}_runs/"}
    if "menu" in spec:
        out["menu"] = menu_record(spec)
    if old.get("note"):
        out["note"] = old["note"]  # how the runs ran (threads, what shared the machine), written by hand
    for f in sorted(runs.glob("accuracy_*.json")):
        d = load(f)
        out["accuracy"][d["policy"]] = [d["seeds"][k] for k in sorted(d["seeds"], key=int)]
    for f in sorted(runs.glob("rro_*.json")):
        d = load(f)
        out["rro"][d["policy"]] = [d["seeds"][k] for k in sorted(d["seeds"], key=int)]
    for f in sorted(runs.glob("race_*.json")):
        d = load(f)
        out["race"][d["arm"]] = [d["seeds"][k] for k in sorted(d["seeds"], key=int)]
    save(path, out)
    return path


def speed_from_records(do_commit: bool) -> Path:
    """The speed record from the committed ``sokoban6`` run itself: the summed wall time of its coverage +
    accuracy seeds (every ε, 20 seeds, the defaults) and of the first 6 race arms' 50 seeds each, as each
    per-seed record measured it (single-threaded, on the shared machine its summary names)."""
    summary = load(RESULTS / "credit_audit_sokoban6.json")
    acc = summary["accuracy"]
    six = [a.name for a in race_arms()][:6]
    st = summary["settings"]
    out = {"setting": "sokoban6", "source": "per-seed wall times of credit_audit_sokoban6_runs/",
           "coverage_accuracy": {"seconds": sum(x["seconds"] for v in acc.values() for x in v), "seeds": st["seeds"],
                                 "policies": list(acc), "m": st["m"], "limit_seconds": 300},
           "race": {"seconds": sum(r["seconds"] for a in six for r in summary["race"][a]), "arms": six,
                    "seeds": st["race_seeds"], "episodes": st["race_episodes"], "limit_seconds": 900},
           "threads": os.environ.get("OMP_NUM_THREADS"), "machine": summary["machine"],
           "load_average_before_after": None}
    path = RESULTS / "credit_audit_speed.json"
    save(path, out)
    commit([path], "credit_audit: speed record", do_commit)
    return path


def speed(do_commit: bool) -> Path:
    """Coverage + accuracy of ``sokoban6`` at the defaults (every ε, 20 seeds), and a race of 50 seeds × 6 arms
    on it, timed (single-threaded)."""
    spec = SETTINGS["sokoban6"]
    settings = AuditSettings()
    sim = Sim(envs.factory(spec["env"], **spec["options"]))
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    for pol in policies(settings).values():
        for seed in range(settings.seeds):
            accuracy_seed(sim, pol, seed, settings)
    acc_s = time.perf_counter() - t0
    six = [a.name for a in race_arms()][:6]
    t0 = time.perf_counter()
    for arm in six:
        for seed in range(settings.race_seeds):
            race_seed(sim, arm, seed, settings)
    race_s = time.perf_counter() - t0
    out = {"setting": "sokoban6", "coverage_accuracy": {"seconds": acc_s, "seeds": settings.seeds,
                                                        "policies": list(policies(settings)), "m": settings.m,
                                                        "limit_seconds": 300},
           "race": {"seconds": race_s, "arms": six, "seeds": settings.race_seeds,
                    "episodes": settings.race_episodes, "limit_seconds": 900},
           "threads": os.environ.get("OMP_NUM_THREADS"), "machine": machine_info(),
           "load_average_before_after": [load_before, os.getloadavg()[0]]}
    path = RESULTS / "credit_audit_speed.json"
    save(path, out)
    commit([path], "credit_audit: speed benchmark record", do_commit)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", choices=list(SETTINGS))
    ap.add_argument("--parts", nargs="+", default=None, choices=["coverage", "accuracy", "race", "rro"])
    ap.add_argument("--speed", action="store_true", help="run the speed benchmark")
    ap.add_argument("--speed-from-records", action="store_true",
                    help="the speed record from the sokoban6 run's own per-seed wall times")
    ap.add_argument("--commit", action="store_true", help="git commit each finished record")
    args = ap.parse_args()
    if args.speed:
        print(speed(args.commit))
        return 0
    if args.speed_from_records:
        print(speed_from_records(args.commit))
        return 0
    if not args.setting:
        ap.error("give --setting or --speed")
    parts = args.parts or SETTINGS[args.setting]["parts"]
    print(run_setting(args.setting, parts, args.commit))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
