import pytest


@pytest.fixture(scope="session")
def creditflow_cache(tmp_path_factory):
    """A private cache dir for generated databases/games (keeps ~/.cache untouched)."""
    return tmp_path_factory.mktemp("creditflow-cache")
