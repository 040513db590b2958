"""Issue 76: a built-in env (WebShop, Sokoban, SQL, every ``BaseTextEnv``) refuses ``step()`` before ``reset()`` instead
of playing from whatever state it was built in; ``restore()`` starts an episode as ``reset()`` does."""

import pytest


@pytest.mark.parametrize("name", ["webshop", "sokoban", "sql"])
def test_a_step_before_reset_is_an_error_not_a_silent_play(name, creditflow_cache, monkeypatch):
    from creditflow import envs

    monkeypatch.setenv("CREDITFLOW_CACHE", str(creditflow_cache))
    with pytest.raises(envs.EnvError, match=rf"{name}: step\(\) called before reset\(\); call reset\(seed=...\) first"):
        envs.make(name).step("look")
    played = envs.make(name)
    played.reset(seed=3)
    snap = played.snapshot()
    restored = envs.make(name)  # restore() starts an episode too: no reset needed before it
    restored.restore(snap)
    assert restored.step("look")[4]["state_key"] == played.step("look")[4]["state_key"]
