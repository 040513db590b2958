import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The test models are tiny: intra-op threads only add spin-waiting (badly so on a loaded 2-core machine).
# Subprocesses (CLI tests) inherit this through the environment.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    import torch

    torch.set_num_threads(1)
    yield


def _tiny_policy(tmp_path_factory, name: str, num_attention_heads: int):
    """A very small Qwen2 policy built the way the CLI builds the default (tokenizer trained locally)."""
    from creditflow.config import RunConfig
    from creditflow.policy.tiny import build_tiny_policy
    from creditflow.envs.configured import env_factory
    from creditflow.policy.factory import prompt_builder
    from creditflow.rollout.expert import expert_corpus

    cfg = RunConfig()
    factory = env_factory(cfg.env, cfg.rollout.max_steps)
    env = factory()
    corpus = expert_corpus(factory, prompt_builder(cfg.policy, cfg.rollout, env), list(range(40)))
    out = tmp_path_factory.mktemp(name) / "model"
    build_tiny_policy(out, corpus, vocab_size=400, seed=0, isolate_chars=env.tokenizer_isolate_chars,
                      hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=num_attention_heads, num_key_value_heads=1)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return _tiny_policy(tmp_path_factory, "tiny", num_attention_heads=2)


@pytest.fixture(scope="session")
def tiny_vllm_model_dir(tmp_path_factory):
    """Like ``tiny_model_dir``, with one 32-wide attention head: vLLM's CPU attention needs head_dim >= 32."""
    return _tiny_policy(tmp_path_factory, "tiny_vllm", num_attention_heads=1)
