"""The Ray env executor gives the same rollouts and the same preference data as the in-process one."""

import json

import pytest

from creditflow.pairs.collect import PreferenceCollector
from creditflow.pairs.preferences import PreferenceWriter
from creditflow.rollout.engine import TaskSpec
from creditflow.rollout.trajectory import StartState
from creditflow.rollout.executors import InProcessEnvExecutor, RayEnvExecutor
from tests.pairs.helpers import SOKOBAN, RandomPolicyBackend, engine

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_executor():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    ex = RayEnvExecutor(SOKOBAN, num_workers=2)  # two actors: slots alternate between them
    yield ex
    ex.close()
    ray.shutdown()


def _collect(executor, directory):
    eng = engine(RandomPolicyBackend(), SOKOBAN, executor=executor)
    c = PreferenceCollector(eng, exploration="rising", candidates=3, mc_rollouts=3, seed=7,
                            env_name="sokoban")
    summary = c.collect([300_000 + i for i in range(4)], PreferenceWriter(directory, {"seed": 7}))
    rows = [json.loads(line) for line in (directory / "tasks.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("seconds")
    return summary, (directory / "preferences.jsonl").read_text(), rows


def test_ray_executor_matches_in_process(tmp_path, ray_executor):
    import torch

    specs = [TaskSpec("sokoban/3", 3), TaskSpec("sokoban/4", 4, start=StartState(4, ["<invalid>x", "up"]))]
    out = []
    for ex in (InProcessEnvExecutor(SOKOBAN), ray_executor):
        torch.manual_seed(0)
        trajs = engine(RandomPolicyBackend(), SOKOBAN, executor=ex).rollout(specs, group_size=3)
        out.append([t.to_dict(include_tokens=True) for t in trajs])
    assert out[0] == out[1]

    local = _collect(InProcessEnvExecutor(SOKOBAN), tmp_path / "local")
    remote = _collect(ray_executor, tmp_path / "ray")
    assert local[0]["rollouts"] > 0 and local[0]["steps"] > 0
    assert remote[1] == local[1]  # same preference data, byte for byte
    assert remote[2] == local[2]  # same accounting
