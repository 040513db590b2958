import json

import pytest

from creditflow.rollout.trajectory import (Step, Trajectory, TrajectoryFormatError, read_jsonl, write_jsonl)


def make_traj():
    return Trajectory(task_id="sokoban/1", traj_id="sokoban/1/0", steps=[
        Step(state="s0", observation="o0", action="up", response="<action>up</action>", valid=True, reward=-0.1,
             prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5]),
        Step(state="s1", observation="o1", action="down", valid=False, reward=-0.2, done=True),
    ], final_state="s2", success=True, score=1.0, meta={"seed": 1})


def test_round_trip_and_defaults(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [make_traj()])
    back = read_jsonl(path)[0]
    assert back.group_id == "sokoban/1"  # defaults to task_id
    assert back.steps[0].action == "up" and back.steps[1].valid is False
    assert back.steps[0].prompt_ids is None  # token fields not written by default
    assert back.total_reward == pytest.approx(-0.3)
    assert back.states() == ["s0", "s1", "s2"]
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) == {"task_id", "group_id", "traj_id", "steps", "final_state", "success", "score", "meta"}
    with_tokens = read_jsonl(write_jsonl(tmp_path / "k.jsonl", [make_traj()], include_tokens=True))[0]
    assert with_tokens.steps[0].logprobs == [-0.5]


@pytest.mark.parametrize("line,needle", [
    ('{"task_id": "a", "steps": [}', "invalid JSON"),
    ('[1, 2]', "expected a JSON object"),
    ('{"steps": []}', "missing field 'task_id'"),
    ('{"task_id": "a", "steps": [{"action": "up"}]}', "steps[0]: missing field 'state'"),
    ('{"task_id": "a", "steps": [{"state": "s", "action": "up", "reward": "high"}]}', "field 'reward' must be number"),
    ('{"task_id": "a", "steps": [], "success": "yes"}', "field 'success' must be bool"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, line, needle):
    good = json.dumps(make_traj().to_dict())
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(TrajectoryFormatError) as exc:
        read_jsonl(path)
    assert f"bad.jsonl:3" in str(exc.value)
    assert needle in str(exc.value)


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")

    def items():
        yield make_traj()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_jsonl(target, items())
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
