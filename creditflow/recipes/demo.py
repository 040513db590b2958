"""``creditflow demo``: the main job, end to end on a laptop CPU: ``train`` with the demo presets, then the report.

The presets are YAML shipped in the package, ``creditflow/configs/demo/`` (their comments keep the experiments
behind each value): ``demo.yaml`` the config (:data:`DEMO_DEFAULTS`), ``env_settings.yaml`` the settings per env
(:data:`DEMO_ENV_SETTINGS`), ``quick.yaml`` the overrides of ``--quick`` (:data:`QUICK`) and
``earlier_grpo.yaml`` the RL settings the golden run keeps (:data:`EARLIER_GRPO_DEMO`). Every value can be
overridden with ``key=value`` (``rl.steps=60`` cuts the RL part by 40%, at about half the gain).
"""

from __future__ import annotations

import copy
import time
from importlib import resources
from pathlib import Path
from typing import Any

from creditflow.config import build_config, set_dotted, setting, yaml_load
from creditflow.recipes.report import write_report
from creditflow.recipes.train import run_train


def demo_preset(name: str) -> Any:
    """The demo preset ``creditflow/configs/demo/<name>.yaml`` (read from the installed package)."""
    return yaml_load((resources.files("creditflow") / "configs" / "demo" / f"{name}.yaml").read_text("utf-8"))


DEMO_DEFAULTS: dict = demo_preset("demo")
"""The demo's config (``demo.yaml``): RewardFlow from pi_SFT on Sokoban, 100 steps of 8 x 8."""

EARLIER_GRPO_DEMO: list[str] = demo_preset("earlier_grpo")
"""The demo's RL settings until 2026-11-25 as overrides (``earlier_grpo.yaml``): the golden run keeps them."""

DEMO_ENV_SETTINGS: dict[str, dict[str, object]] = demo_preset("env_settings")
"""Per-env demo settings (``env_settings.yaml``), under the user's config file and overrides."""

QUICK: list[str] = demo_preset("quick")
"""``creditflow demo --quick`` (``quick.yaml``)."""


def demo_config(overrides: list[str], env: str | None = None, out_dir: str | None = None, quick: bool = False,
                config_file: str | None = None):
    """The demo's run config: :data:`DEMO_DEFAULTS` under the env's :data:`DEMO_ENV_SETTINGS`, then the user's
    ``config_file`` and ``overrides`` (``quick``: :data:`QUICK` first)."""
    extra = list(QUICK if quick else []) + list(overrides)
    if env:
        extra.insert(0, setting("env.name", env))
    if out_dir:
        extra.insert(0, setting("out_dir", out_dir))
    where = f"demo config {config_file}" if config_file else "demo config"  # the file a bad value is most likely in
    env_name = build_config(config_file, extra, base=copy.deepcopy(DEMO_DEFAULTS), where=where).env.name
    base = copy.deepcopy(DEMO_DEFAULTS)
    for dotted, value in DEMO_ENV_SETTINGS.get(env_name, {}).items():
        set_dotted(base, dotted, value)
    return build_config(config_file, extra, base=base, where=where)


def run_demo(overrides: list[str], env: str | None = None, out_dir: str | None = None, quick: bool = False,
             config_file: str | None = None) -> Path:
    """``train`` with :func:`demo_config`, then the report; the report folder."""
    cfg = demo_config(overrides, env, out_dir, quick, config_file)
    t0 = time.perf_counter()
    out, trainer, _ = run_train(cfg)
    minutes = (time.perf_counter() - t0) / 60
    note = (f"A --quick smoke run: {cfg.rl.steps} RL steps of {cfg.rollout.tasks_per_step} x "
            f"{cfg.rollout.group_size} rollouts, evaluated on {cfg.rl.eval_episodes} tasks. It checks that every stage "
            "runs; its numbers are noise, not a result (the full demo: creditflow demo)") if quick else None
    report = write_report(out, title=f"creditflow demo: {cfg.rl.algo} on {cfg.env.name}",
                          extra={"env": cfg.env.name, "algo": cfg.rl.algo, "steps": cfg.rl.steps,
                                 "wall time (min)": f"{minutes:.1f}"}, note=note)
    return report
