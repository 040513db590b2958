"""The credit audit's records (issues 71 and 85): coverage, advantage accuracy against Monte-Carlo A^π, bias apart
from noise, the tabular learning race and RRO's pairs, per setting and behaviour policy, resumable.

    python -m benchmarks.credit_audit --setting sokoban6 [--parts coverage accuracy bias race rro lm] [--commit]
    python -m benchmarks.credit_audit --setting sokoban6 --parts lm --jobs 2      # the LM policy, 2 processes
    python -m benchmarks.credit_audit --setting sokoban6 --pilot                  # timing on pilot seeds, never reported
    python -m benchmarks.credit_audit --speed      # the speed benchmark -> benchmarks/results/credit_audit_speed.json
    python -m benchmarks.credit_audit --speed-from-records   # the same record from the sokoban6 run's wall times

Behaviour policies (issue 85; ``POLICIES`` per setting, fixed on pilot seeds before the real ones: the rule is the
ε's, that groups mix successes and failures): the ε-expert at each ε (the records before issue 85, kept; it walks
a shortest path, so its V^π falls with the distance to success: graph credit's shape), the uniform policy, the
detour expert (rate 0.5, ε 0.2: on pilot seeds 500000+ of 16 tasks × 16 rollouts, success 0.70 with 75% of groups
mixed on 6×6 and 0.48 with 88% on 7×7, 2 boxes; household's expert recovers from those detours, so there rate 1,
ε 0.5: success 0.78 with 88% of groups mixed on 2 pilot seeds; the uniform policy: 0.20, 88% mixed), the race's tabular policy frozen at 20%, 50% and 80% sampled
success on each seed's own tasks (trained with GRPO's credit, whose shape is no estimator's state structure), and
the LM (``lm``: the setting's π_SFT samples every action; a random ``subsample`` of each seed's steps is audited,
to fit 2 CPU-hours a setting; coverage and accuracy only). The ``bias`` part draws ``bias_groups`` groups of each
seed's tasks under every non-LM policy. The ``race`` part is the fair race: a fresh pool per seed, every arm at every
rate of ``race_lrs`` on the reported seeds and on ``race_tune_seeds`` tuning seeds (pools below ``race_offset``,
disjoint from the reported ones), each arm's own rate picked on the tuning seeds alone; the race of the records
before issue 85 (one pool for every seed, lr 1) stays in ``race_<arm>.json`` and is no longer run.

Settings (``SETTINGS``, fixed before any run; the ε values were chosen by one thing only, that groups of the
ε-expert mix successes and failures on both Sokoban settings: success 0.86 / 0.52 / 0.35 on 6×6 and
0.67 / 0.25 / 0.08 on 7×7 at ε = 0.5 / 0.75 / 0.9, 160 episodes each; the race's learning rate, budget and
pool were set before its first run and not changed):

- ``sokoban6``: Sokoban 6×6, 1 box, 15 steps;
- ``sokoban7``: Sokoban 7×7, 2 boxes, 20 steps, plans of at least 4 (the ``hard`` setting of
  ``benchmarks/credit_learning.py``);
- ``household``: TextWorld pick-and-place, medium (all four parts; M = 8 and 32 truth continuations for RRO's
  pairs, to afford TextWorld; the race at the audit's defaults, as Sokoban's; the issue-85 policies at M = 16 on a
  random 64 steps of each seed, and in the bias part 32 random triples of each, by cost: ``fair_m``,
  ``fair_subsample``, ``bias_subsample``; 40 accuracy seeds under the uniform policy and the snapshot at 20%,
  whose 20 resolved 27 and 45 steps: ``fair_seeds``);
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
(``accuracy_<policy>.json``, ``bias_<policy>.json``, ``race_fresh_<arm>.json``, ``rro_<policy>.json``; the
earlier shared-pool race in ``race_<arm>.json``), written after each seed under a file lock, so a stopped run
continues where it was and processes given disjoint ``--seeds`` (``--jobs N`` starts them) share the files. A seed of accuracy is recomputed when an estimator arm it lacks is
registered (the same seed gives the same episodes and Monte-Carlo values, so the arms it had keep their
numbers), and a race arm without a file runs: a new estimator joins the records by re-running this script. A file
made under other settings (its M, subsample, model or groups in its head differ from ``SETTINGS`` now) stops the run
with one line (exit 2) before any seed: move it aside to rerun, so no old seed is skipped as done or mixed in.
The summary ``credit_audit_<setting>.json`` holds the settings, the machine (``benchmarks/machine.py``), the
note and the race's tuned rates; the per-seed results stay in the runs folder (``benchmarks/audit_records.py``
reads them), and ``benchmarks/report/`` builds the page and the README rows from both.
Single-threaded (``OMP_NUM_THREADS=1``); ``--commit`` commits each finished file with git.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import benchmarks.one_thread  # noqa: F401 (before numpy loads: the audit runs single-threaded)
from benchmarks.audit_records import per_seed
from benchmarks.cache import write_json
from benchmarks.machine import machine_info
from benchmarks.sft_models import require_weights
from creditflow import envs
from creditflow.auditing.estimators import arms
from creditflow.auditing.race import race_arms
from creditflow.auditing.run import (
    AuditSettings,
    accuracy_seed,
    bias_seed,
    check_race_pools,
    policies,
    race_rates,
    race_seed,
    race_tuning_seed,
    rro_seed,
)
from creditflow.auditing.sim import Sim

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# GraphGPO's arm at the omega of the authors' run script for the env (their algorithm.gamma: Sokoban 0.8, ALFWorld
# 0.1 (household is creditflow's ALFWorld-like env), WebShop 0.2); every other arm at its defaults (issue 84)
GRAPHGPO_OMEGA = {env: {"graphgpo": {"omega": w}} for env, w in (("sokoban", 0.8), ("alfworld", 0.1), ("webshop", 0.2))}

# the behaviour policies of issue 85 beside the ε-expert (AuditSettings.policies and their knobs), fixed on pilot
# seeds before the real ones; "fresh": the fair race's settings
FAIR = {"policies": ("expert", "uniform", "detour", "tabular"), "detour_rate": 0.5, "detour_epsilon": 0.2,
        "tabular_targets": (0.2, 0.5, 0.8), "tabular_lr": 0.3, "bias_groups": 8,
        "race_lrs": (0.1, 0.3, 1.0, 3.0), "race_tune_seeds": 10}
# the LM behaviour policy per setting: the setting's π_SFT (not in git: "build" makes it), the env options its
# prompts need, the config lines it samples with, and the steps per seed the Monte Carlo audits (chosen from a
# timed pilot seed so that 20 seeds fit 2 CPU-hours on 2 cores); "seeds": more than the audit's 20 where 20 left
# the cell under the 50 resolved steps a verdict needs (issue 85: raise the seeds until a cell resolves; the count
# of resolved steps does not look at any estimator, so adding seeds by it favours none). 6×6: 46 resolved steps in
# 20 seeds (2,925 CPU-s), so 40 seeds, about 98 CPU-minutes
DEMO_SFT = {"model": "runs/credit_demo100/sft/sft_model", "options": {"describe_positions": True},
            "overrides": ["generation.max_new_tokens=16"], "subsample": 40, "m": 16, "seeds": 40,
            "build": "python -m benchmarks.credit_learning --setting demo --build-sft runs/credit_demo100/sft"}
SETTINGS = {
    "sokoban6": {"title": "Sokoban 6×6, 1 box", "env": "sokoban", "options": {},
                 "parts": ["coverage", "accuracy", "bias", "race", "rro", "lm"],
                 "audit": {"knobs": GRAPHGPO_OMEGA["sokoban"], **FAIR}, "lm": DEMO_SFT},
    "sokoban7": {"title": "Sokoban 7×7, 2 boxes", "env": "sokoban",
                 "options": {"size": 7, "num_boxes": 2, "max_steps": 20, "min_plan": 4},
                 "parts": ["coverage", "accuracy", "bias", "race", "rro", "lm"],
                 "audit": {"knobs": GRAPHGPO_OMEGA["sokoban"], **FAIR, "tabular_lr": 1.0},
                 "lm": {"model": "runs/hard_sft/sft_model", "options": {"describe_positions": True},
                        "overrides": ["generation.max_new_tokens=16"], "subsample": 30, "m": 16,
                        "build": "python -m benchmarks.credit_learning --setting hard --build-sft runs/hard_sft"}},
    # the LM race's 7×7 setting (one box, plans of at least 4 moves), for the prediction table's audit
    "sokoban7_1box": {"title": "Sokoban 7×7, 1 box", "env": "sokoban",
                      "options": {"size": 7, "num_boxes": 1, "max_steps": 20, "min_plan": 4},
                      "parts": ["coverage", "accuracy", "bias", "lm"],
                      "audit": {"knobs": GRAPHGPO_OMEGA["sokoban"], **FAIR},
                      # LM seeds 40 by 6×6's rule (the count of resolved steps looks at no estimator): its first 20 seeds resolved
                      # 29 of 600 audited steps (3,100 CPU-s beside a one-thread LM race), under the 50 a verdict needs
                      "lm": {"model": "runs/sokoban7_sft/sft_model", "options": {"describe_positions": True},
                             "overrides": ["generation.max_new_tokens=16"], "subsample": 30, "m": 16, "seeds": 40,
                             "build": "python -m benchmarks.lm_race --setting sokoban7 --build-sft runs/sokoban7_sft"}},
    "household": {"title": "household (TextWorld), medium", "env": "household",
                  "options": {"difficulty": "medium", "num_games": 400},
                  "parts": ["coverage", "accuracy", "bias", "race", "rro"],
                  # M 16 for the policies of issue 85 (the ε-expert's records ran at 8: eps=0.5 resolved no step);
                  # race pools of 6: 50 reported + 10 tuning seeds x 6 tasks fit the 400 games without sharing one
                  # the detour expert at rate 1, ε 0.5 and snapshots trained at lr 1: at rate 0.5, ε 0.2 (and 0.5) the
                  # household expert recovers from every detour (success 1.0, no group mixed, pilot seeds 500000+);
                  # rate 1, ε 0.5: success 0.78, 88% of groups mixed; rate 0.5, ε 0.75: 0.78, 62%
                  "audit": {"m": 8, "rro_truth_m": 32, "knobs": GRAPHGPO_OMEGA["alfworld"], **FAIR, "race_pool": 6,
                            "detour_rate": 1.0, "detour_epsilon": 0.5, "tabular_lr": 1.0,
                            # the bias part (every policy: none had run) on 32 random triples (seen in 2+ of its 8
                            # groups) a seed, fixed before its first seed by cost alone: on pilot seed 500000 the
                            # uniform policy's 8 groups hold 5,087 distinct (state, step, action) to estimate (~1 s
                            # each at M 16, ~85 min a seed), its 693 repeated triples 3,140 of them (4.5 a triple):
                            # 32 triples ≈ 145 estimates, ~2.5 min a seed
                            "bias_subsample": 32},
                  # and a random 64 steps per seed audited (fixed before their first real seed, by cost alone): on
                  # 2 pilot seeds the uniform policy's episodes run 23.1 steps (the ε 0.9 expert's 19.4, whose 20
                  # seeds cost 4,849 CPU-s at M 8), so every step at M 16 would cost ~3.5 CPU-hours a policy; the
                  # ε 0.9 records resolve 7.6% of steps at M 8, so 20 × 64 audited steps should resolve over 50
                  "fair_m": 16, "fair_subsample": 64,
                  # accuracy seeds per policy where 20 left its cell under the 50 resolved steps a verdict needs, by
                  # the LM's rule above (the count looks at no estimator): uniform resolved 27 of 1,280 audited
                  # steps in 20 seeds (success 0.14), the snapshot at 20% 45 (success 0.21), so 40 seeds each
                  "fair_seeds": {"uniform": 40, "tabular=0.2": 40}},
    "webshop": {"title": "WebShop, generated catalog", "env": "webshop", "options": {},
                "parts": ["coverage", "accuracy", "rro", "lm"],
                "audit": {"epsilons": (0.25, 0.5, 0.75), "knobs": GRAPHGPO_OMEGA["webshop"]},
                "menu": {"model": "benchmarks/results/webshop_sft_E4b/sft_model", "size": 4,
                         "overrides": ["generation.max_new_tokens=48"]},
                # the LM policy's first 20 seeds resolved 10 of 200 audited steps (|A^π| > 2 SE; the reward is the
                # purchase's score): by that arm-blind count alone, 120 seeds (about 60 expected); seeds 0-110 resolved
                # 40 (0.36 a seed), so by the same count 160
                "lm": {"model": "benchmarks/results/webshop_sft_E4b/sft_model", "options": {},
                       "overrides": ["generation.max_new_tokens=48"], "subsample": 10, "m": 8, "seeds": 160}},
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


def weights_sha256(model: str) -> str:
    """sha256 of a model dir's ``model.safetensors`` (what ``sha256sum`` prints): a π_SFT rebuilt on another host is
    another policy, and the records say which one they were made with."""
    import hashlib

    return hashlib.sha256((ROOT / model / "model.safetensors").read_bytes()).hexdigest()


def menu_record(spec: dict) -> dict | None:
    """What the summary says of the menu model: path, sha256 of its weights, sampled actions per state."""
    if "menu" not in spec:
        return None
    return {**spec["menu"], "sha256": weights_sha256(spec["menu"]["model"])}


def check_menu(name: str, spec: dict, parts: list[str], pilot: bool) -> None:
    """Exit (status 2, one line) when a part that samples free-text menus would sample them from other weights than
    the ones the setting's records were made with (the summary's menu sha256): its seeds would mix two π_SFTs."""
    if "menu" not in spec or not set(parts) & {"coverage", "accuracy", "bias", "race", "rro"}:
        return
    had = load(summary_path(name, pilot)).get("menu", {}).get("sha256")
    require_weights(ROOT / spec["menu"]["model"], spec["menu"].get("build"))
    now = weights_sha256(spec["menu"]["model"])
    if had and had != now:
        print(f"error: {spec['menu']['model']} holds weights with sha256 {now[:12]}, but the {name} records' menus came "
              f"from {had[:12]} ({shown(summary_path(name, pilot))}); move the records and the summary "
              f"aside to rerun with these weights", file=sys.stderr)
        raise SystemExit(2)


def label_file(label: str) -> str:
    return label.replace("=", "").replace(" ", "_").replace(",", "")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def save(path: Path, data: dict) -> None:
    write_json(path, data, sort_keys=True, newline=True)


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path``'s records (processes with disjoint seeds share a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# what a records file's head may differ in without making its seeds another experiment's
HEAD_FREE = ("threads",)


def shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def check_head(path: Path, head: dict) -> None:
    """Exit (status 2, one line) when ``path`` holds records made under other settings than ``head`` (a changed M,
    subsample, model, ...): its seeds would be skipped as done, or mixed with new ones. Nothing is written."""
    data = load(path)
    changed = [f"{k} {data[k]!r} (settings now: {v!r})" for k, v in head.items()
               if k not in HEAD_FREE and k in data and data[k] != v]
    if changed:
        print(f"error: {shown(path)} holds records made with "
              f"{', '.join(changed)}; move it aside to rerun under the new settings", file=sys.stderr)
        raise SystemExit(2)


def store(path: Path, head: dict, section: str, key: str, value: dict) -> None:
    """Write one result into ``path``'s ``section`` under ``key`` (re-read under the lock: other processes' results
    written meanwhile are kept; :func:`check_head` first)."""
    with locked(path):
        check_head(path, head)
        data = load(path) or dict(head)
        data.setdefault(section, {})[key] = value
        save(path, data)


def commit(paths: list[Path], message: str, enabled: bool) -> None:
    if not enabled:
        return
    subprocess.run(["git", "add", *map(str, paths)], cwd=ROOT, check=True)
    if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=ROOT).returncode:
        subprocess.run(["git", "commit", "-q", "-m", message], cwd=ROOT, check=True)


PILOT_OFFSET = 500_000  # --pilot: tasks from here (never a reported seed's) and its own records
PILOT_RACE_OFFSET = 700_000


def audit_settings(spec: dict, pilot: bool = False, fair: bool = False) -> AuditSettings:
    """The setting's AuditSettings; ``fair``: with the M and subsample of the issue-85 policies (``fair_m``,
    ``fair_subsample``, where they differ);
    ``pilot``: tasks and race pools of the pilot, 2 seeds, 2 race seeds, 1 tuning seed."""
    kw = dict(spec["audit"])
    if fair and spec.get("fair_m"):
        kw["m"] = spec["fair_m"]
    if fair and spec.get("fair_subsample"):
        kw["subsample"] = spec["fair_subsample"]
    if pilot:
        kw.update(task_offset=PILOT_OFFSET, race_offset=PILOT_RACE_OFFSET, seeds=2, race_seeds=2, race_tune_seeds=1)
    return AuditSettings(**kw)


def runs_dir(name: str, pilot: bool) -> Path:
    return RESULTS / f"credit_audit_{name}{'_pilot' if pilot else ''}_runs"


def summary_path(name: str, pilot: bool) -> Path:
    return RESULTS / f"credit_audit_{name}{'_pilot' if pilot else ''}.json"


LM_LABEL = "model=pi_sft"  # the LM behaviour policy's label (its records: accuracy_modelpi_sft.json)


def lm_policy(spec: dict):
    """The setting's LM behaviour policy on its own Sim (the env options its prompts need)."""
    from creditflow.config import build_config
    from creditflow.recipes.audit import ModelPolicy

    lm = spec["lm"]
    require_weights(ROOT / lm["model"], lm.get("build"))
    options = {**spec["options"], **lm.get("options", {})}
    factory = envs.factory(spec["env"], **options)
    pol = ModelPolicy(ROOT / lm["model"], lm.get("overrides", []), label=LM_LABEL)
    pol.bind(build_config(None, [f"env.name={spec['env']}"], base={"env": {"kwargs": options}}), factory)
    return pol, Sim(factory, chunk=512)


def run_setting(name: str, parts: list[str], do_commit: bool, seeds: list[int] | None = None,
                pilot: bool = False, only: list[str] | None = None) -> Path:
    """Every asked part of the setting, seed by seed, skipping the results already recorded. ``seeds``: only these
    seeds (of accuracy, bias, LM, RRO and the race's reported and tuning seeds); ``only``: only these policy labels
    (accuracy, bias, RRO) or race arms."""
    spec = SETTINGS[name]
    settings = audit_settings(spec, pilot)
    fair = audit_settings(spec, pilot, fair=True)
    runs = runs_dir(name, pilot)
    t_setting = time.perf_counter()
    parts = [p for p in parts if p in spec["parts"]]
    check_menu(name, spec, parts, pilot)
    pick = (lambda n: [i for i in range(n) if seeds is None or i in seeds])
    keep = (lambda label: only is None or label in only)
    written: list[Path] = []
    sim = make_sim(spec) if any(p in parts for p in ("coverage", "accuracy", "bias", "race", "rro")) else None
    pols = {k: v for k, v in policies(settings).items() if keep(k)}
    arm_names = [a.name for a in arms(knobs=settings.knobs)]
    want = [p for p in ("coverage", "accuracy") if p in parts]
    if want:
        for label, pol in pols.items():
            st = settings if label.startswith("eps=") else fair  # the ε-expert's records keep their M
            path = runs / f"accuracy_{label_file(label)}.json"
            acc_head = {"policy": label, "m": st.m, **({"subsample": st.subsample} if st.subsample else {})}
            check_head(path, acc_head)
            for seed in pick(spec.get("fair_seeds", {}).get(label, st.seeds) if st is fair else st.seeds):
                have = load(path).get("seeds", {}).get(str(seed))
                if have and all(p in have for p in want) and (
                        "accuracy" not in want or set(arm_names) <= set(have["accuracy"]["arms"])):
                    continue
                value = accuracy_seed(sim, pol, seed, st, want)
                store(path, acc_head, "seeds", str(seed), value)
                print(f"{name} accuracy {label} seed {seed}: {value['seconds']:.1f} s", flush=True)
            written.append(path)
            commit([path], f"credit_audit {name}: accuracy records, {label}", do_commit)
    if "bias" in parts:
        for label, pol in pols.items():
            st = settings if label.startswith("eps=") else fair
            path = runs / f"bias_{label_file(label)}.json"
            bias_head = {"policy": label, "m": st.bias_m or st.m, "groups": st.bias_groups,
                         **({"subsample": st.bias_subsample} if st.bias_subsample else {})}
            check_head(path, bias_head)
            for seed in pick(st.seeds):
                if str(seed) in load(path).get("seeds", {}):
                    continue
                value = bias_seed(sim, pol, seed, st)
                store(path, bias_head, "seeds", str(seed), value)
                print(f"{name} bias {label} seed {seed}: {value['seconds']:.1f} s", flush=True)
            written.append(path)
            commit([path], f"credit_audit {name}: bias records, {label}", do_commit)
    if "lm" in parts and "lm" in spec:
        pol, lm_sim = lm_policy(spec)
        lm = spec["lm"]
        st = AuditSettings(**{**asdict(fair), "m": lm["m"], "subsample": lm["subsample"],
                              "seeds": lm.get("seeds", fair.seeds)})
        path = runs / f"accuracy_{label_file(pol.label)}.json"
        lm_head = {"policy": pol.label, "m": st.m, "subsample": st.subsample, "model": lm["model"],
                   "sha256": weights_sha256(lm["model"]),
                   "options": lm.get("options", {}), "overrides": lm.get("overrides", []),
                   "threads": os.environ.get("OMP_NUM_THREADS")}
        check_head(path, lm_head)
        for seed in pick(st.seeds):
            if str(seed) in load(path).get("seeds", {}):
                continue
            value = accuracy_seed(lm_sim, pol, seed, st, ["coverage", "accuracy"])
            store(path, lm_head, "seeds", str(seed), value)
            print(f"{name} LM accuracy seed {seed}: {value['seconds']:.1f} s ({value['accuracy']['audited']} of "
                  f"{value['accuracy']['steps']} steps audited)", flush=True)
        written.append(path)
        commit([path], f"credit_audit {name}: LM-policy accuracy records", do_commit)
    if "rro" in parts:
        for label, pol in pols.items():
            if not label.startswith("eps="):  # RRO's pairs keep their ε-expert records (issue 71's scope)
                continue
            path = runs / f"rro_{label_file(label)}.json"
            for seed in pick(settings.seeds):
                if str(seed) in load(path).get("seeds", {}):
                    continue
                store(path, {"policy": label}, "seeds", str(seed), rro_seed(sim, pol, seed, settings))
            print(f"{name} rro {label}: done", flush=True)
            written.append(path)
            commit([path], f"credit_audit {name}: RRO pair records, {label}", do_commit)
    if "race" in parts:
        check_race_pools(sim, settings)
        lrs = list(dict.fromkeys([*settings.race_lrs, settings.race_lr]))
        for arm in race_arms(knobs=settings.knobs):
            if not keep(arm.name):
                continue
            path = runs / f"race_fresh_{arm.name.replace('+', '_plus_')}.json"
            head = {"arm": arm.name, "pools": "fresh"}
            t0 = time.perf_counter()
            for lr in settings.race_lrs:  # tuning first: the rate is chosen before any reported seed runs
                for i in pick(settings.race_tune_seeds):
                    if f"{i}@{lr:g}" not in load(path).get("tuning", {}):
                        store(path, head, "tuning", f"{i}@{lr:g}", race_tuning_seed(sim, arm.name, i, settings, lr))
            for lr in lrs:
                for seed in pick(settings.race_seeds):
                    if f"{seed}@{lr:g}" not in load(path).get("runs", {}):
                        store(path, head, "runs", f"{seed}@{lr:g}", race_seed(sim, arm.name, seed, settings, lr))
            print(f"{name} race {arm.name}: {time.perf_counter() - t0:.0f} s", flush=True)
            written.append(path)
            commit([path], f"credit_audit {name}: fair race records, {arm.name}", do_commit)
    summary = summarize(name, settings, time.perf_counter() - t_setting, pilot)
    commit([summary], f"credit_audit {name}: summary", do_commit)
    return summary


def summarize(name: str, settings: AuditSettings, seconds: float, pilot: bool = False) -> Path:
    spec = SETTINGS[name]
    runs = runs_dir(name, pilot)
    path = summary_path(name, pilot)
    old = load(path)
    fair = audit_settings(spec, pilot, fair=True)
    out = {"setting": name, "title": spec["title"], "env": spec["env"], "options": spec["options"],
           "parts": spec["parts"], "settings": asdict(settings),
           "machine": old.get("machine") or machine_info(), "records": f"benchmarks/results/{runs.name}/"}
    if fair.m != settings.m:
        out["fair_m"] = fair.m  # the M of the issue-85 policies (the ε-expert's records keep settings.m)
    if fair.subsample != settings.subsample:
        out["fair_subsample"] = fair.subsample  # and the steps per seed they audit
    if spec.get("fair_seeds"):
        out["fair_seeds"] = spec["fair_seeds"]  # accuracy seeds of the policies whose 20 did not resolve
    if pilot:
        out["pilot"] = True
    if "menu" in spec:  # other weights than the records' ran no menu part (check_menu): the records' stay named
        now = menu_record(spec)
        out["menu"] = old["menu"] if old.get("menu", {}).get("sha256", now["sha256"]) != now["sha256"] else now
    if "lm" in spec:
        made_with = load(runs / f"accuracy_{label_file(LM_LABEL)}.json").get("sha256")
        out["lm"] = {**spec["lm"], **({"sha256": made_with} if made_with else {})}
    if old.get("note"):
        out["note"] = old["note"]  # how the runs ran (threads, what shared the machine), written by hand
    out["race_rates"] = race_rates(per_seed(runs)["race_tuning"])  # the per-seed records stay in runs/ only
    save(path, out)
    return path


def speed_from_records(do_commit: bool) -> Path:
    """The speed record from the committed ``sokoban6`` run itself: the summed wall time of its coverage +
    accuracy seeds (every ε, 20 seeds, the defaults) and of the first 6 race arms' 50 seeds each, as each
    per-seed record measured it (single-threaded, on the shared machine its summary names)."""
    summary = load(RESULTS / "credit_audit_sokoban6.json")
    records = per_seed(runs_dir("sokoban6", False))
    acc = records["accuracy"]
    six = [a.name for a in race_arms()][:6]
    st = summary["settings"]
    out = {"setting": "sokoban6", "source": "per-seed wall times of credit_audit_sokoban6_runs/",
           "coverage_accuracy": {"seconds": sum(x["seconds"] for v in acc.values() for x in v), "seeds": st["seeds"],
                                 "policies": list(acc), "m": st["m"], "limit_seconds": 300},
           "race": {"seconds": sum(r["seconds"] for a in six for r in records["race"][a]), "arms": six,
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


def seed_list(text: str | None) -> list[int] | None:
    """``--seeds``: ``3``, ``0-9`` or ``0,2,5-7``."""
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", choices=list(SETTINGS))
    ap.add_argument("--parts", nargs="+", default=None, choices=["coverage", "accuracy", "bias", "race", "rro", "lm"])
    ap.add_argument("--seeds", default=None, help="only these seeds (e.g. 0-9), of every part asked for")
    ap.add_argument("--only", nargs="+", default=None, help="only these policy labels (eps=0.5, uniform, ...) or arms")
    ap.add_argument("--jobs", type=int, default=1, help="split --seeds (default: all) across this many processes")
    ap.add_argument("--pilot", action="store_true", help="2 seeds of every part on pilot tasks, into *_pilot records")
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
    seeds = seed_list(args.seeds)
    if args.jobs > 1:
        every = seeds if seeds is not None else list(range(max(50, audit_settings(SETTINGS[args.setting]).seeds)))
        procs = []
        for j in range(args.jobs):
            mine = every[j::args.jobs]
            cmd = [sys.executable, "-m", "benchmarks.credit_audit", "--setting", args.setting, "--parts", *parts,
                   "--seeds", ",".join(map(str, mine))] + (["--only", *args.only] if args.only else []) + \
                  (["--pilot"] if args.pilot else [])
            procs.append(subprocess.Popen(cmd, cwd=ROOT))
        if any(p.wait() for p in procs):
            return 1
        spec = SETTINGS[args.setting]
        path = summarize(args.setting, audit_settings(spec, args.pilot), 0.0, args.pilot)
        commit([p for p in runs_dir(args.setting, args.pilot).glob("*.json")] + [path],
               f"credit_audit {args.setting}: records ({', '.join(parts)})", args.commit)
        print(path)
        return 0
    print(run_setting(args.setting, parts, args.commit, seeds, args.pilot, args.only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
