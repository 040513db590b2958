"""Evaluation splits: validation for choices, test for reported numbers, disjoint from each other and from the
training seeds (docs/environments.md "Evaluation splits")."""

import json

import pytest

from creditflow import envs
from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.recipes.eval import evaluate_saved_policy
from creditflow.recipes.report import write_report
from creditflow.recipes.train import run_train
from creditflow.rollout.seeding import held_out_seeds, split_seeds
from creditflow.trainer.metrics import read_metrics

OFFSETS = {"eval_seed_offset": 1_000_000, "test_seed_offset": 2_000_000}


def test_validation_keeps_the_seeds_every_earlier_run_evaluated_on():
    assert held_out_seeds("validation", 3, **OFFSETS) == [1_000_000, 1_000_001, 1_000_002]


def test_procedural_test_seeds_are_their_own_range_above_validation():
    test = held_out_seeds("test", 4, **OFFSETS, validation_episodes=512)
    assert test == [2_000_000, 2_000_001, 2_000_002, 2_000_003]
    assert not set(test) & set(held_out_seeds("validation", 512, **OFFSETS))
    assert max(test) >= 1_000_000  # above every training seed (drawn below eval_seed_offset)


def test_test_offset_inside_the_validation_range_is_refused():
    with pytest.raises(UserError, match="env.test_seed_offset"):
        held_out_seeds("test", 2, eval_seed_offset=100, test_seed_offset=110, validation_episodes=32)


def test_a_finite_pool_is_split_from_both_ends():
    # reset(seed=z) plays task z % pool: validation takes the pool from its start, test from its end
    pool = 10
    val = [s % pool for s in held_out_seeds("validation", 6, **OFFSETS)]
    test = [s % pool for s in held_out_seeds("test", 4, **OFFSETS, validation_episodes=6, pool=pool)]
    assert val == [0, 1, 2, 3, 4, 5] and test == [9, 8, 7, 6]
    # nested: a smaller test set is a prefix of a larger one
    assert held_out_seeds("test", 2, **OFFSETS, validation_episodes=6, pool=pool) == \
        held_out_seeds("test", 4, **OFFSETS, validation_episodes=6, pool=pool)[:2]
    with pytest.raises(UserError, match="held-out pool has 10 tasks"):
        held_out_seeds("test", 5, **OFFSETS, validation_episodes=6, pool=pool)


def test_unknown_split_is_one_line():
    with pytest.raises(UserError, match="validation, test"):
        held_out_seeds("train", 1, **OFFSETS)


def test_pool_envs_expose_their_held_out_pool():
    cfg = build_config(None, ["env.name=webshop", "rl.eval_episodes=64"])
    factory = lambda: envs.make("webshop", split="test")  # noqa: E731
    pool = factory().num_tasks
    test = split_seeds(cfg.env, "test", 32, cfg.rl.eval_episodes, factory)
    val = split_seeds(cfg.env, "validation", 64, 64, factory)
    assert not {s % pool for s in test} & {s % pool for s in val}


def test_sokoban_test_levels_differ_from_validation_levels():
    env = envs.make("sokoban", describe_positions=True)

    def level(seed):
        return env.reset(seed=seed)[0]

    val = {level(s) for s in held_out_seeds("validation", 64, **OFFSETS)}
    test = [level(s) for s in held_out_seeds("test", 64, **OFFSETS, validation_episodes=64)]
    assert sum(t in val for t in test) <= 2  # distinct seeds; the generator may repeat a tiny level by chance


def test_a_run_with_test_episodes_evaluates_the_test_split_before_and_after_only(tmp_path, tiny_model_dir):
    cfg = build_config(None, [f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=2",
                              "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2",
                              "rl.eval_every=1", "rl.test_episodes=3", "generation.max_new_tokens=6",
                              "rollout.max_steps=3", "tensorboard=false"])
    out, _, _ = run_train(cfg, log=lambda *_: None)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows if "test/success_rate" in r] == [0, 2]
    assert all(r["test/episodes"] == 3 for r in rows if "test/episodes" in r)
    assert [r["step"] for r in rows if "eval/success_rate" in r] == [0, 1, 2]
    report = write_report(out)
    assert "test/success_rate" in (report / "summary.md").read_text()
    summary = json.loads((report / "summary.json").read_text())
    assert summary["test_before"]["step"] == 0 and summary["test_after"]["step"] == 2


def test_eval_command_scores_the_test_split(tmp_path, tiny_model_dir):
    cfg = build_config(None, [f"policy.model={tiny_model_dir}", "generation.max_new_tokens=6",
                              "rollout.max_steps=2"])
    _, val = evaluate_saved_policy(cfg, tiny_model_dir, 2)
    _, test = evaluate_saved_policy(cfg, tiny_model_dir, 2, split="test")
    assert [t.meta["seed"] for t in val] == [1_000_000, 1_000_001]
    assert [t.meta["seed"] for t in test] == [2_000_000, 2_000_001]
