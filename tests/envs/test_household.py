"""Household env on TextWorld: generation + cache, expert plans, no-op detection, snapshot ≡ replay."""

import json
import sys
import time

import pytest

from creditflow.envs import EnvError, check_determinism, make, replay

pytest.importorskip("textworld")

from creditflow.envs.household import PRESETS, ensure_game, is_noop_feedback  # noqa: E402


@pytest.fixture(scope="module")
def cache(creditflow_cache):
    return str(creditflow_cache / "textworld")


def test_missing_textworld_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(EnvError) as exc:
        make("household")
    msg = str(exc.value)
    assert "\n" not in msg and "pip install creditflow[household]" in msg


@pytest.mark.parametrize("split, seed", [("train", 0), ("train", 1), ("test", 0)])
def test_expert_plan_wins(cache, split, seed):
    env = make("household", split=split, cache_dir=cache)
    obs, info = env.reset(seed=seed)
    assert info["task"].startswith("Your task is to: put the ") and obs.endswith(info["task"])
    assert "TextWorld" not in obs.split("\n")[0]  # the banner is gone
    plan = env.expert_actions()
    assert plan and all(a in info["admissible_actions"] for a in plan[:1])
    for action in plan:
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["action_valid"]
    assert terminated and reward == 1.0 and info["won"] and info["score"] == 1.0


def test_splits_are_disjoint(cache):
    train, test = make("household", cache_dir=cache), make("household", split="test", cache_dir=cache)
    assert train.reset(seed=0)[1]["game_key"] != test.reset(seed=0)[1]["game_key"]
    assert train.game_seed(0) != test.game_seed(0)
    assert train.game_seed(100) == train.game_seed(0)  # num_games=100: seed z plays game z % 100


def test_determinism(cache):
    check_determinism(lambda: make("household", cache_dir=cache), seed=0, n_steps=8)


def test_generation_is_deterministic_and_cached(cache, tmp_path):
    preset = PRESETS["easy"]
    first = ensure_game(preset, 0, cache)
    t = time.perf_counter()
    again = ensure_game(preset, 0, cache)
    assert time.perf_counter() - t < 1.0 and again.folder == first.folder  # a cache hit
    other = ensure_game(preset, 0, tmp_path)  # generated anew in another cache
    assert other.key == first.key and other.task == first.task
    a, b = json.loads((first.folder / "game.json").read_text()), json.loads((other.folder / "game.json").read_text())
    assert a["world"] == b["world"] and a["quests"] == b["quests"]
    # a damaged cache entry is detected by its content hash and rebuilt
    (other.folder / "game.z8").write_bytes(b"garbage")
    rebuilt = ensure_game(preset, 0, tmp_path)
    assert (rebuilt.folder / "game.z8").read_bytes() != b"garbage"


def test_invalid_and_noop_actions(cache):
    env = make("household", cache_dir=cache)
    obs, info = env.reset(seed=0)
    key = info["state_key"]
    assert key.startswith("at ") and "carrying nothing" in key
    for action in ["take the moon", "", "undo", "restart", "tw-trace-actions"]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs == "Nothing happens." and not info["action_valid"] and info["state_key"] == key
    obs, *_, info = env.step("LOOK.")  # admissible, case and punctuation forgiven; informative, so valid
    assert info["action_valid"] and info["state_key"] == key
    take = next(a for a in info["admissible_actions"] if a.startswith("take "))
    obs, *_, info = env.step(take)
    assert info["action_valid"] and info["state_key"] != key and "carrying nothing" not in info["state_key"]

    loose = make("household", cache_dir=cache, admissible_only=False)
    loose.reset(seed=0)
    for action in ["go north", "jump", "take the moon", "xyzzy"]:  # sent to the game, nothing changes
        obs, *_, info = loose.step(action)
        assert not info["action_valid"] and obs, action
    obs, *_, info = loose.step("inventory")
    assert info["action_valid"]
    for action in ["look \udc80", 5, None, ["look"]]:  # not text the game can receive: invalid, never sent
        obs, *_, info = loose.step(action)
        assert obs == "Nothing happens." and not info["action_valid"], action


def test_noop_feedback_patterns():
    for text in ["Nothing happens.", "You can't see any such thing.", "That's not a verb I recognise.",
                 "That's already open.", "The tablet is already here.", "You need to take the cane first."]:
        assert is_noop_feedback(text), text
    for text in ["You pick up the cane from the ground.", "You are carrying nothing.",
                 "-= Pantry =-\nYou are in a pantry. There is no exit."]:
        assert not is_noop_feedback(text), text


def test_snapshot_matches_replay(cache):
    env = make("household", cache_dir=cache)
    env.reset(seed=1)
    prefix = ["look", env.expert_actions()[0]]
    for a in prefix:
        env.step(a)
    snap = env.snapshot()
    here = (env._obs, env._info())
    env.step("inventory")
    obs, info = env.restore(snap)
    assert (obs, info["state_key"]) == (here[0], here[1]["state_key"])
    fresh = make("household", cache_dir=cache)
    res = replay(fresh, 1, prefix)
    assert res.observation == obs and res.info["state_key"] == info["state_key"]
    assert res.info["admissible_actions"] == info["admissible_actions"]
    rest_a = [env.step(a)[:4] for a in env.expert_actions()]
    rest_b = [fresh.step(a)[:4] for a in fresh.expert_actions()]
    assert rest_a == rest_b and rest_a[-1][2]  # both finish the quest the same way
    obs2, info2 = env.restore(snap)  # a snapshot can be restored again
    assert obs2 == obs and info2["state_key"] == info["state_key"]


def test_snapshot_shares_the_static_game_only(cache):
    """The restore shares TextWorld's compiled Game (never changed in play) instead of deep-copying it, and
    copies everything that play changes: a restored copy played to the end leaves the snapshot and the
    original game where they were."""
    from creditflow.envs.household import _game_states

    env = make("household", cache_dir=cache, memo=False)  # the copy-based snapshot (memo=True shares a frame)
    env.reset(seed=2)
    plan = env.expert_actions()
    env.step(plan[0])
    snap = env.snapshot()
    game = env._state["game"]
    assert snap["state"]["game"] is game and snap["state"]["_game_progression"] is not env._state["_game_progression"]
    for state in _game_states(snap["env"]).values():
        assert state["game"] is game
    other = make("household", cache_dir=cache, memo=False)
    other.restore(snap)
    for action in plan[1:]:
        *_, info = other.step(action)
    assert info["won"]
    assert not env._state["won"] and env.expert_actions() == plan[1:]  # the original did not move
    env.restore(snap)
    assert not env._state["won"] and env.expert_actions() == plan[1:]  # nor did the snapshot


def test_option_errors(cache):
    with pytest.raises(EnvError, match="unknown difficulty"):
        make("household", difficulty="legendary")
    with pytest.raises(EnvError, match="split"):
        make("household", split="dev")
    with pytest.raises(EnvError, match="num_games"):
        make("household", num_games=0)


def test_pickle_between_episodes(cache):
    import pickle

    env = make("household", cache_dir=cache)
    env.reset(seed=0)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.reset(seed=0)[0] == env.reset(seed=0)[0]


def test_the_transition_memo_plays_as_textworld_does(cache):
    """memo=True (the default) and memo=False give the same observations, rewards, ends and infos along random
    walks over several games, through snapshots restored mid-walk, in another env (the memo is per process,
    shared) and after the memo was cleared."""
    import random

    from creditflow.envs import household

    household._MEMO = household._Memo()
    rng = random.Random(0)
    fast, slow = make("household", cache_dir=cache), make("household", cache_dir=cache, memo=False)
    other = make("household", cache_dir=cache)
    played = 0
    for walk in range(24):
        seed = walk % 4
        obs, info = fast.reset(seed=seed)
        assert (obs, info) == slow.reset(seed=seed)
        snaps = None
        for t in range(rng.randint(3, 14)):
            action = rng.choice(info["admissible_actions"] + ["look", "inventory", "jump around"])
            a, b = fast.step(action), slow.step(action)
            assert a == b, (walk, t, action)
            info = a[4]
            played += 1
            if a[2] or a[3]:
                break
            if t == 2:
                snaps = (fast.snapshot(), slow.snapshot())
        if snaps is not None:  # restored into another memo env, then played on the same way
            assert other.restore(snaps[0]) == slow.restore(snaps[1])
            for action in slow.expert_actions() or []:
                assert other.step(action) == slow.step(action)
        if walk == 12:
            household._MEMO.starts.clear(), household._MEMO.frames.clear(), household._MEMO.edges.clear()
    assert played > 100
    assert household._MEMO.edges  # the later walks read the table


def test_rollouts_side_by_side_keep_their_own_running_game(cache, monkeypatch):
    """Envs of one game stepped in alternation (a group in lockstep, as the audit and its race run them) each keep
    a TextWorld game on their own path, so a memo miss rarely resets and replays a path (with one shared game, as
    before, nearly every miss did), and they reach the states, rewards and ends that memo=False reaches."""
    import random

    from creditflow.envs import household

    counts = {"reset": 0, "step": 0}
    start = household.HouseholdEnv._start_game

    def counted(self, record=None):
        env = start(self, record)
        reset, step = env.reset, env.step
        env.reset = lambda *a, **k: counts.__setitem__("reset", counts["reset"] + 1) or reset(*a, **k)
        env.step = lambda *a, **k: counts.__setitem__("step", counts["step"] + 1) or step(*a, **k)
        return env

    monkeypatch.setattr(household.HouseholdEnv, "_start_game", counted)

    def play(lanes: int) -> tuple[list, dict]:
        monkeypatch.setattr(household, "_MEMO", household._Memo(lanes=lanes))
        envs = [make("household", cache_dir=cache) for _ in range(4)]
        infos = [env.reset(seed=7)[1] for env in envs]
        counts.update(reset=0, step=0)
        rng, out, live = random.Random(3), [], [True] * 4
        for t in range(10):
            for i in range(4):  # in alternation: each miss comes from another rollout's path than the last one's
                if live[i]:
                    action = rng.choice(infos[i]["admissible_actions"])
                    out.append((i, action, envs[i].step(action)))
                    infos[i], live[i] = out[-1][2][4], not (out[-1][2][2] or out[-1][2][3])
        return out, dict(counts)

    def outcome(step):  # what a state's first-seen text cannot change (see the module's notes on the memo)
        obs, reward, done, truncated, info = step
        return info["state_key"], reward, done, truncated, info["action_valid"], info["won"]

    shared, before = play(lanes=1)
    own, now = play(lanes=8)
    assert len(own) >= 20
    assert [(i, a, outcome(s)) for i, a, s in own] == [(i, a, outcome(s)) for i, a, s in shared]
    slow = [make("household", cache_dir=cache, memo=False) for _ in range(4)]
    for env in slow:
        env.reset(seed=7)
    assert [outcome(slow[i].step(action)) for i, action, _ in own] == [outcome(s) for _, _, s in own]
    assert now["reset"] <= 4 and before["reset"] > 10, (now, before)
    assert now["step"] < before["step"] / 2, (now, before)
