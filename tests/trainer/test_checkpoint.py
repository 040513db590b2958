"""Checkpoints move between machines: a run saved on a GPU continues on a CPU."""

from types import SimpleNamespace

import pytest
import torch
import torch.serialization

from creditflow.trainer.checkpoint import load_trainer_state


def _save_as_if_on_cuda(obj, path, monkeypatch):
    """``torch.save`` with every storage tagged ``cuda:0``, as a GPU run writes it (no GPU needed)."""
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "_package_registry",
                  [(0, lambda _storage: "cuda:0", lambda *_: None), *torch.serialization._package_registry])
        torch.save(obj, path)


def test_a_checkpoint_written_on_a_gpu_resumes_on_this_device(tmp_path, monkeypatch):
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    _save_as_if_on_cuda(opt.state_dict(), tmp_path / "optimizer.pt", monkeypatch)
    _save_as_if_on_cuda({"step": 7, "rng": {"torch": torch.get_rng_state()}}, tmp_path / "trainer_state.pt",
                        monkeypatch)
    if not torch.cuda.is_available():  # the files really are tagged for a GPU
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(tmp_path / "optimizer.pt", weights_only=False)

    fresh = torch.optim.Adam(net.parameters(), lr=0.1)
    loaded = {}
    trainer = SimpleNamespace(optimizer=fresh, load_state_dict=loaded.update)
    load_trainer_state(trainer, tmp_path)
    assert loaded["step"] == 7
    for p in net.parameters():  # Adam's moments are back, on the parameters' device
        ours, theirs = fresh.state[p], opt.state[p]
        assert ours["exp_avg"].device == p.device
        torch.testing.assert_close(ours["exp_avg"], theirs["exp_avg"])
        torch.testing.assert_close(ours["exp_avg_sq"], theirs["exp_avg_sq"])
