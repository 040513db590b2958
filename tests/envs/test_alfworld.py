"""ALFWorld adapter: a clear one-line error without the package/data; the real games when both exist."""

import importlib.util

import pytest

from creditflow.envs import EnvError, check_determinism, make
from creditflow.envs.alfworld import data_root, find_games


def test_without_package_or_data_the_error_is_one_line(tmp_path):
    with pytest.raises(EnvError) as exc:
        make("alfworld", data_dir=str(tmp_path))  # an empty folder: no games (or no package)
    msg = str(exc.value)
    # which line depends on what is missing here: the package, its PDDL planner, or the data
    assert "\n" not in msg and msg.startswith("alfworld:") and "pip install" in msg


def test_bad_split():
    with pytest.raises(EnvError, match="split"):
        make("alfworld", split="dev")


def _have_data() -> bool:
    return importlib.util.find_spec("alfworld") is not None and bool(find_games(data_root(), "train")[:1])


needs_data = pytest.mark.skipif(not _have_data(), reason="alfworld package or ALFWORLD_DATA games not available")


@needs_data
@pytest.mark.slow
def test_alfworld_episode():
    env = make("alfworld")
    obs, info = env.reset(seed=0)
    assert info["task"].startswith("Your task is to:") and info["admissible_actions"]
    obs, _, _, _, bad = env.step("fly to the moon")
    assert obs == "Nothing happens." and not bad["action_valid"] and bad["state_key"] == info["state_key"]
    plan = env.expert_actions()
    assert plan
    for action in plan:
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    assert info["won"] and reward == 1.0


@needs_data
@pytest.mark.slow
def test_alfworld_determinism():
    check_determinism(lambda: make("alfworld", expert=False), seed=3, n_steps=6)
