import pytest


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The tiny model gains nothing from intra-op threads, and on a shared 2-core machine torch's thread
    pool spin-waits: the training smoke runs here take ~1 s with one thread and ~35 s with two under load.
    Restored afterwards so other test directories are unaffected."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
