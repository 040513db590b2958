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


class _FakeGame:
    """A scripted stand-in for an ALFWorld game (TextWorld PDDL backend), to test the adapter's logic."""

    def __init__(self, path):
        self.path = path

    def _state(self, feedback):
        facts = [f"atLocation(agent, {self.loc})"]
        if self.held:
            facts.append("holds(agent, mug 1)")
        if self.placed:
            facts.append("inReceptacle(mug 1, cabinet 1)")
        if self.loc == "countertop 1" and not self.held and not self.placed:
            facts.append("inReceptacle(mug 1, countertop 1)")
        adm = ["look", "inventory", "go to countertop 1", "go to cabinet 1"]
        if self.loc == "countertop 1" and not self.held and not self.placed:
            adm.append("take mug 1 from countertop 1")
        if self.loc == "cabinet 1" and self.held:
            adm.append("move mug 1 to cabinet 1")
        plan = []
        if not self.placed:
            if not self.held:
                plan += ([] if self.loc == "countertop 1" else ["go to countertop 1"]) + ["take mug 1 from countertop 1"]
            plan += ["go to cabinet 1", "move mug 1 to cabinet 1"]
            if self.held and self.loc == "cabinet 1":
                plan = ["move mug 1 to cabinet 1"]
        return {"feedback": feedback, "facts": facts, "admissible_commands": sorted(adm), "won": self.placed,
                "policy_commands": plan}

    def reset(self):
        self.loc, self.held, self.placed = "middle", False, False
        return self._state("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room.\n\n"
                           "Your task is to: put some mug in cabinet.")

    def step(self, command):
        if command == "look":
            fb = f"You are facing the {self.loc}."
        elif command.startswith("go to "):
            self.loc, fb = command[6:], f"You arrive at {command[6:]}."
        elif command.startswith("take"):
            self.held, fb = True, "You pick up the mug 1 from the countertop 1."
        elif command.startswith("move"):
            self.held, self.placed, fb = False, True, "You move the mug 1 to the cabinet 1."
        else:
            fb = "Nothing happens."
        state = self._state(fb)
        return state, float(state["won"]), state["won"]

    def close(self):
        pass


class _FakeTextWorld:
    @staticmethod
    def EnvInfos(**kw):
        return kw

    @staticmethod
    def start(path, infos, wrappers=()):
        return _FakeGame(path)


@pytest.fixture
def fake_alfworld(monkeypatch, tmp_path):
    import creditflow.envs.alfworld as adapter

    monkeypatch.setattr(adapter, "_modules", lambda: (_FakeTextWorld, lambda shuffle: None, None))
    for split, n in (("train", 2), ("valid_unseen", 1)):
        for i in range(n):
            game = tmp_path / "json_2.1.1" / split / f"pick_and_place_simple-Mug-None-Cabinet-{i}" / "trial_1"
            game.mkdir(parents=True)
            (game / "game.tw-pddl").write_text("{}")
    other = tmp_path / "json_2.1.1" / "train" / "look_at_obj_in_light-Book-None-Lamp-1" / "trial_1"
    other.mkdir(parents=True)
    (other / "game.tw-pddl").write_text("{}")
    return str(tmp_path)


def test_adapter_logic_on_a_scripted_game(fake_alfworld):
    env = make("alfworld", data_dir=fake_alfworld)
    assert len(env.games) == 3
    assert len(make("alfworld", data_dir=fake_alfworld, task_types=[1]).games) == 2
    assert len(make("alfworld", data_dir=fake_alfworld, split="test").games) == 1
    obs, info = env.reset(seed=0)
    assert info["task"] == "Your task is to: put some mug in cabinet." and "middle" in info["state_key"]
    obs, _, _, _, bad = env.step("take mug 1 from countertop 1")  # not admissible here
    assert obs == "Nothing happens." and not bad["action_valid"] and bad["state_key"] == info["state_key"]
    obs, _, _, _, looked = env.step("Look")
    assert looked["action_valid"] and looked["state_key"] == info["state_key"]
    plan = env.expert_actions()
    for action in plan:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_valid"]
    assert terminated and reward == 1.0 and info["won"] and "holds nothing" in info["state_key"]
    check_determinism(lambda: make("alfworld", data_dir=fake_alfworld), seed=1, n_steps=6)
