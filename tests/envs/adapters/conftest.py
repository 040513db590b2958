"""What the adapter tests share: ``creditflow train`` through the CLI at a tiny budget on an adapted env."""

import json

import pytest

from creditflow.cli import main
from creditflow.trainer.metrics import read_metrics

# two tasks x two rollouts, three turns, two RL steps, one held-out evaluation of two episodes
TINY = ["rl.steps=2", "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=2",
        "generation.max_new_tokens=6", "rollout.max_steps=3", "tensorboard=false"]


@pytest.fixture
def train_cli(tmp_path, tiny_model_dir):
    """Run ``creditflow train --env ENV --model <tiny> ...``; returns (exit code, metrics rows, run directory)."""

    def run(env: str, *overrides: str, algo: str = "rewardflow"):
        out = tmp_path / "run"
        with pytest.raises(SystemExit) as exc:
            main(["train", "--env", env, "--model", str(tiny_model_dir), "--out", str(out), f"rl.algo={algo}",
                  *TINY, *overrides])
        return exc.value.code, read_metrics(out / "metrics.jsonl"), out

    return run


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def act(action: str) -> str:
    return f"<think></think><action>{action}</action>"


def scripted_rollouts(factory, plans, seed: int = 0, max_steps: int | None = None):
    """One group of ``len(plans)`` episodes of ``seed`` through the rollout engine; episode ``k`` answers
    ``plans[k][t]`` at its turn ``t`` (a response without an action block where the plan holds None). Each plan
    must be exactly as long as its episode, so the episodes still running at turn ``t`` are those with a longer
    plan, in slot order (the engine's order)."""
    from creditflow.rollout.engine import TaskSpec
    from tests.pairs.helpers import ScriptedBackend, engine

    def respond(call, j, prompt):
        running = [k for k, plan in enumerate(plans) if len(plan) > call]
        action = plans[running[j]][call]
        return act(action) if action is not None else "no idea"

    backend = ScriptedBackend(respond)
    eng = engine(backend, factory, max_steps=max_steps)
    trajs = eng.rollout([TaskSpec(f"task{seed}", seed)], group_size=len(plans))
    assert backend.calls == [sum(len(p) > t for p in plans) for t in range(max(map(len, plans)))]
    return trajs
