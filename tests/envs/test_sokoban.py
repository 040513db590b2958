import itertools
import time

import pytest

from creditflow.envs import EnvError, check_determinism, make, replay
from creditflow.envs.sokoban import ACTION_NAMES, Level, generate_level, solve


def small_level():
    # #####
    # #P_#      player (1,1); box (2,2); target (3,2)
    # #_X#
    # #_O#
    # #####
    walls = frozenset({(0, c) for c in range(4)} | {(4, c) for c in range(4)} | {(r, 0) for r in range(5)}
                      | {(r, 3) for r in range(5)})
    return Level(5, 4, walls, frozenset({(3, 2)}), frozenset({(2, 2)}), (1, 1))


def test_solver_is_optimal_against_brute_force():
    level = small_level()
    plan = solve(level)
    assert plan == ["right", "down"]
    # brute force: no shorter action sequence solves it
    from creditflow.envs.sokoban import _move

    for n in range(len(plan)):
        for seq in itertools.product(ACTION_NAMES, repeat=n):
            state = (level.player, level.boxes)
            for a in seq:
                state = _move(state, a, level.walls) or state
            assert not state[1] <= level.targets


@pytest.mark.parametrize("seed", range(0, 60, 7))
def test_solver_matches_brute_force_length_on_generated_levels(seed):
    level, plan = generate_level(seed)
    from creditflow.envs.sokoban import _move

    best = None
    for n in range(0, len(plan) + 1):
        for seq in itertools.product(ACTION_NAMES, repeat=n):
            state = (level.player, level.boxes)
            for a in seq:
                state = _move(state, a, level.walls) or state
            if state[1] <= level.targets:
                best = n
                break
        if best is not None:
            break
    assert best == len(plan)


def test_generator_only_emits_solvable_levels_within_max_steps():
    env = make("sokoban")
    for seed in range(150):
        env.reset(seed=seed)
        plan = list(env.optimal_plan)
        assert 1 <= len(plan) <= env.max_steps
        for i, a in enumerate(plan):
            _, _, term, trunc, info = env.step(a)
            assert term == (i == len(plan) - 1)
        assert info["won"] and info["score"] == 1.0


def test_two_box_levels_are_solvable():
    env = make("sokoban", size=7, num_boxes=2, max_steps=30)
    for seed in range(10):
        env.reset(seed=seed)
        for a in env.expert_actions():
            _, _, term, _, info = env.step(a)
        assert info["won"]


def test_reward_shaping_matches_papers_default():
    env = make("sokoban")
    env.reset(seed=1)  # 'right', 'down', 'down' pushes the box twice, onto the target at the end
    rewards = [env.step(a)[1] for a in ["right", "down", "down"]]
    assert rewards == pytest.approx([-0.1, -0.1, -0.1 + 1.0 + 10.0])


def test_invalid_action_is_no_move_and_flagged():
    env = make("sokoban")
    obs, info = env.reset(seed=1)
    obs2, reward, term, trunc, info2 = env.step("jump")
    assert obs2 == obs and info2["action_valid"] is False and reward == pytest.approx(-0.1)
    assert info2["state_key"] == info["state_key"]


def test_render_and_state_key():
    env = make("sokoban")
    obs, info = env.reset(seed=1)
    assert obs == "######\n##P__#\n##_X_#\n###__#\n###O_#\n######"
    assert info["state_key"] == obs


def test_determinism_and_local_rng():
    import random

    check_determinism(lambda: make("sokoban"), seed=11, n_steps=15)
    random.seed(1)
    a = make("sokoban").reset(seed=5)[0]
    random.seed(2)
    b = make("sokoban").reset(seed=5)[0]
    assert a == b


def test_snapshot_equals_replay():
    env = make("sokoban")
    obs0, _ = env.reset(seed=21)
    actions = ["left", "up", "right", "down", "down"]
    observations = [obs0]
    for a in actions:
        observations.append(env.step(a)[0])
    snap_env = make("sokoban")
    snap_env.reset(seed=21)
    for a in actions[:3]:
        snap_env.step(a)
    snap = snap_env.snapshot()
    fresh = make("sokoban")
    fresh.reset(seed=99)
    obs_restored, info_restored = fresh.restore(snap)
    replayed = replay(make("sokoban"), 21, actions[:3], observations[:4])
    assert obs_restored == replayed.observation == observations[3]
    assert info_restored["state_key"] == replayed.info["state_key"]
    # both continue identically
    assert fresh.step("down")[0] == observations[4]


def test_bad_options():
    with pytest.raises(EnvError, match="too small"):
        make("sokoban", size=3, num_boxes=2)
    with pytest.raises(EnvError, match="num_boxes"):
        make("sokoban", num_boxes=0)


@pytest.mark.parametrize("options, needle", [
    ({"size": "abc"}, "size must be an integer, got 'abc'"),
    ({"size": 6.5}, "size must be an integer, got 6.5"),
    ({"describe_positions": "maybe"}, "describe_positions must be true or false"),
    ({"height": "7"}, "height must be an integer or None"),
    ({"size": 1000}, "size must be in 3..24"),
    ({"width": 2}, "width must be in 3..24"),
    ({"num_boxes": 4}, "num_boxes must be in 1..3"),
    ({"max_steps": 0}, "max_steps must be in 1..200"),
    ({"min_plan": 20, "max_steps": 15}, "min_plan must be in 1..15"),
    ({"step_penalty": float("nan")}, "step_penalty must be a finite number"),
])
def test_options_are_typed_and_bounded_no_coercion(options, needle):
    with pytest.raises(EnvError) as exc:
        make("sokoban", **options)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_largest_allowed_level_resets_quickly():
    env = make("sokoban", size=24, num_boxes=3, max_steps=200)
    start = time.perf_counter()
    env.reset(seed=0)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("action", [5, None, ["up"], "up\udc80"])
def test_non_text_actions_are_invalid_not_errors(action):
    env = make("sokoban")
    obs, _ = env.reset(seed=3)
    after, _, done, _, info = env.step(action)
    assert not info["action_valid"] and after == obs and not done


def test_describe_positions_adds_offsets_but_keeps_grid_state_key():
    env = make("sokoban", describe_positions=True)
    obs, info = env.reset(seed=1)
    grid = "######\n##P__#\n##_X_#\n###__#\n###O_#\n######"
    assert obs == grid + "\nBox: 1 down, 1 right of you; its target: 2 down of it."
    assert info["state_key"] == grid
    obs, *_ = env.step("right")
    assert obs.endswith("Box: 1 down of you; its target: 2 down of it.")
