"""SFT demonstrations in the run's multi-turn layout: the prompt is the chat the engine shows at that step."""

from creditflow.envs import make
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.expert import expert_trajectories
from creditflow.trainer.sft import demo_examples


def test_demo_examples_follow_the_layout():
    demos = expert_trajectories(lambda: make("sokoban"), [1, 2, 3])
    window = demo_examples(demos, PromptBuilder("sokoban"))
    conversation = demo_examples(demos, PromptBuilder("sokoban", template="compact", history="conversation"))
    assert len(window) == len(conversation) == sum(len(d) for d in demos)
    at = 0
    for demo in demos:
        for t, step in enumerate(demo.steps):
            win, conv = window[at + t], conversation[at + t]
            assert len(win["prompt"]) == 1 and step.observation in win["prompt"][0]["content"]
            assert [m["role"] for m in conv["prompt"]] == ["user", "assistant"] * t + ["user"]
            assert [m["content"] for m in conv["prompt"][1::2]] == [s.response for s in demo.steps[:t]]
            assert step.observation in conv["prompt"][-1]["content"]
            assert win["completion"] == conv["completion"] == [{"role": "assistant", "content": step.response}]
        at += len(demo.steps)


def _prompt_nll(model, tok, examples) -> float:
    """Mean NLL of the prompt tokens of ``examples`` under ``model``."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            ids = tok.apply_chat_template(ex["prompt"], add_generation_prompt=True, tokenize=True)
            ids = torch.tensor([list(ids["input_ids"] if hasattr(ids, "keys") else ids)])
            logits = model(input_ids=ids).logits[0, :-1]
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += ids.shape[1] - 1
    return total / count


def test_prompt_loss_trains_on_the_prompt_tokens(tiny_model_dir, tmp_path):
    """sft.prompt_loss=true puts the loss on the prompt too: the prompts' NLL falls far below what response-only
    SFT of the same steps leaves it at, while both learn the responses."""
    from creditflow.config import SFTConfig
    from creditflow.policy.load import load_policy
    from creditflow.trainer.sft import train_sft
    from creditflow.trainer.trl_runner import TRLOptions

    demos = expert_trajectories(lambda: make("sokoban"), [1, 2])
    examples = demo_examples(demos, PromptBuilder("sokoban", template="compact"))
    nll = {}
    for prompt_loss in (False, True):
        model, tok = load_policy(tiny_model_dir, "cpu")
        before = _prompt_nll(model, tok, examples)
        cfg = SFTConfig(epochs=8, lr=3e-3, batch_size=8, max_length=1024, prompt_loss=prompt_loss)
        metrics = train_sft(model, tok, examples, cfg, TRLOptions(tmp_path / str(prompt_loss)))
        assert metrics["sft/steps"] > 0
        nll[prompt_loss] = _prompt_nll(model.eval(), tok, examples)
    assert nll[True] < before - 1.0  # the prompts were learned...
    assert nll[True] < nll[False] - 0.5  # ...which response-only SFT does not do


def test_group_by_length_batches_similar_lengths(tiny_model_dir, tmp_path):
    """sft.group_by_length: the same examples, fewer padded tokens (each batch is as wide as its longest)."""
    from creditflow.config import SFTConfig
    from creditflow.policy.load import load_policy
    from creditflow.trainer.sft import train_sft
    from creditflow.trainer.trl_runner import TRLOptions

    demos = expert_trajectories(lambda: make("sokoban"), list(range(1, 9)))
    short = demo_examples(demos, PromptBuilder("sokoban", template="compact", history="window", history_length=0))
    long = demo_examples(demos, PromptBuilder("sokoban", template="paper", history_length=2))
    examples = short + long  # two length modes, interleaved by the random sampler
    seen = {}
    for grouped in (False, True):
        model, tok = load_policy(tiny_model_dir, "cpu")
        shapes = []
        model.register_forward_pre_hook(lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                        with_kwargs=True)
        # transformers groups within random mega-batches of min(50, len // (4 x batch)) batches: 3 here
        cfg = SFTConfig(epochs=2, lr=1e-3, batch_size=2, max_length=1024, group_by_length=grouped)
        train_sft(model, tok, examples, cfg, TRLOptions(tmp_path / str(grouped)))
        seen[grouped] = shapes
    assert sum(b for b, _ in seen[True]) == sum(b for b, _ in seen[False]) == 2 * len(examples)
    padded = {g: sum(b * w for b, w in shapes) for g, shapes in seen.items()}
    assert padded[True] < 0.95 * padded[False]
