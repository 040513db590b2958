"""Issue 76 (hardening, round 3): a user's env that misbehaves mid-run, option values taken literally, errors of
the types the API promises, checkpoint manifests of the wrong shape, and what round 2's probes still found."""

import json

import pytest
import torch

from creditflow.train.checkpoint import checkpoint_problem, checkpoint_step, resume_checkpoint, write_manifest

# --------------------------------------------------------------------------------------------------
# class 4: a checkpoint manifest of the wrong shape is damage, and --resume falls back
# --------------------------------------------------------------------------------------------------


def _checkpoint(root, step):
    path = root / "checkpoints" / f"step_{step:06d}"
    path.mkdir(parents=True)
    torch.save({}, path / "optimizer.pt")
    torch.save({"step": step, "world_size": 1}, path / "trainer_state.pt")
    (path / "config.json").write_text("{}")
    write_manifest(path, step)
    return path


def _edit(manifest, change):
    data = json.loads(manifest.read_text())
    change(data)
    manifest.write_text(json.dumps(data))


WRONG_SHAPES = {
    "files a list": lambda m: m.update(files=[]),
    "files a string": lambda m: m.update(files="all"),
    "no files": lambda m: m.pop("files"),
    "step a string": lambda m: m.update(step="2"),
    "step negative": lambda m: m.update(step=-1),
    "a size that is text": lambda m: m["files"]["config.json"].update(bytes="2"),
    "a size that is a float": lambda m: m["files"]["config.json"].update(bytes=2.0),
    "a file without its hash": lambda m: m["files"]["config.json"].pop("sha256"),
    "a hash that is a number": lambda m: m["files"]["config.json"].update(sha256=5),
    "facts a list": lambda m: m["files"].update({"config.json": [2, "ab"]}),
    "a file outside the checkpoint": lambda m: m["files"].update({"../x": m["files"]["config.json"]}),
    "no optimizer state listed": lambda m: m["files"].pop("optimizer.pt"),
    "another format": lambda m: m.update(format="creditflow-checkpoint/9"),
    "an unknown key": lambda m: m.update(extra=1),
    "the top level a list": lambda m: m.clear(),
}


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_manifest_of_the_wrong_shape_is_damage_and_resume_takes_the_previous_checkpoint(shape, tmp_path):
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    assert checkpoint_problem(newest) is None
    if shape == "the top level a list":
        (newest / "manifest.json").write_text("[]")
    else:
        _edit(newest / "manifest.json", WRONG_SHAPES[shape])
    problem = checkpoint_problem(newest)
    assert problem == "manifest.json is unreadable or not a checkpoint manifest"
    found = resume_checkpoint(tmp_path)
    assert found.path.name == "step_000001" and found.step == 1
    assert "step_000002: manifest.json is unreadable or not a checkpoint manifest" in found.note()
    assert checkpoint_step(newest) == 2  # the step is then read from trainer_state.pt
