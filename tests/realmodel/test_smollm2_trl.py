"""SmolLM2 in TRL's GRPOTrainer through ``CreditGRPOTrainer`` with an ``environment_factory`` (issue 74).

SmolLM2's own chat template renders no tool calls, which TRL refuses for tools; ``with_tool_calling``
(creditflow/integrations/chatml_tools.py) gives it a ChatML template with tools and TRL's parser for the
``<tool_call>`` markup. Zero-shot SmolLM2-135M answers the tool prompt in prose, so, as the tiny policy's TRL
test does, a few SFT steps teach it the call format first. The walk env and the expected advantages are those of
tests/integrations/test_trl.py.
"""

import os
import random

import numpy as np
import pytest

pytest.importorskip("trl", minversion="1.16.0")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling  # noqa: E402

from creditflow.errors import UserError  # noqa: E402
from creditflow.integrations.chatml_tools import chatml_tool_template, with_tool_calling  # noqa: E402
from creditflow.integrations.trl import CreditGRPOTrainer  # noqa: E402
from tests.integrations.test_trl import TracedWalk, check_placement, config, expected, loss_mask, runs  # noqa: E402

G = 4  # rollouts per group
PROMPT = "Walk to the goal. Call the move tool with d set to r."


def tool_calling_smollm2(model_dir, tok, steps: int = 5, seed: int = 0):
    """SmolLM2 after ``steps`` SFT steps (batch 2, lr 1e-4, loss on the completion) on walks of two ``move`` calls
    in the tool template: zero-shot it does not call tools (it answers the tool prompt in prose), after this it
    mostly does. Measured: 4 steps, about 30 s on one thread; 3 of 4 samples are tool calls."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tools = [TracedWalk().move]
    chats = []
    for _ in range(8):
        messages = [{"role": "user", "content": PROMPT + TracedWalk().reset()}]
        for _ in range(2):
            messages += [{"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "move", "arguments": {"d": rng.choice("lr")}}}]},
                {"role": "tool", "name": "move", "content": f"at {rng.randint(0, 3)}"}]
        full = tok.apply_chat_template(messages, tools=tools, return_dict=True)["input_ids"]
        prompt = tok.apply_chat_template(messages[:1], tools=tools, add_generation_prompt=True, return_dict=True)
        chats.append((list(full), len(prompt["input_ids"])))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    for step in range(steps):
        batch = [chats[(2 * step + k) % len(chats)] for k in range(2)]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.tensor([c + [tok.pad_token_id] * (width - len(c)) for c, _ in batch])
        real = torch.arange(width)[None, :] < torch.tensor([len(c) for c, _ in batch])[:, None]
        labels = ids.masked_fill(~real, -100)
        for i, (_, n) in enumerate(batch):
            labels[i, :n] = -100
        model(input_ids=ids, attention_mask=real.long(), labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    return model


def test_the_tool_template_keeps_smollm2s_chats_and_renders_tools(smollm2_dir):
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "bye"}]
    own = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert not supports_tool_calling(tok)
    with_tool_calling(tok)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == own  # no tools: the same
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "move", "arguments": {"d": "r"}}}]}
    text = tok.apply_chat_template([chat[0], call, {"role": "tool", "name": "move", "content": "at 1"}],
                                   tools=[TracedWalk().move], tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert '"name": "move"' in text.split("<|im_end|>")[0]  # the tool's schema in the system turn
    assert '<tool_call>\n{"name": "move", "arguments": {"d": "r"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\nat 1\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
    prompt = tok.apply_chat_template([chat[0]], tokenize=False, add_generation_prompt=True)
    parsed = tok.parse_response('<tool_call>\n{"name": "move", "arguments": {"d": "l"}}\n</tool_call><|im_end|>',
                                prefix=prompt)
    assert parsed["tool_calls"][0]["function"] == {"name": "move", "arguments": {"d": "l"}}


def test_a_template_that_is_not_chatml_is_one_error(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tok.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    with pytest.raises(UserError, match="not ChatML"):
        with_tool_calling(tok)
    assert "default_system = 'it\\'s\\n'" in chatml_tool_template("it's\n")


@pytest.mark.slow
def test_credit_grpo_trainer_with_an_environment_factory_on_smollm2(tmp_path, smollm2_dir):
    tok = with_tool_calling(AutoTokenizer.from_pretrained(str(smollm2_dir)))
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": PROMPT}]]})
    trainer = CreditGRPOTrainer(model=tool_calling_smollm2(smollm2_dir, tok), processing_class=tok,
                                train_dataset=ds, environment_factory=TracedWalk, estimator="rewardflow",
                                args=config(tmp_path, per_device_train_batch_size=G, num_generations=G,
                                            max_completion_length=64, max_tool_calling_iterations=2,
                                            learning_rate=1e-6))
    assert [t.__name__ for t in trainer._env_tools[None]] == ["move"]
    trainer.model.train()
    torch.manual_seed(0)
    output = trainer._generate_and_score_completions([dict(row) for row in ds for _ in range(G)])
    prompt_ids, completion_ids, masks, _ = trainer._cf_gen
    envs = trainer.environments
    masks = [m[:len(c)] for m, c in zip(masks, completion_ids)]
    spans = [runs(m) for m in masks]
    keys = [env.trace[:len(s)] for env, s in zip(envs, spans)]
    step_adv, spans2 = expected(trainer.processing_class, "rewardflow", None, prompt_ids, completion_ids, masks, keys,
                                [env.reached for env in envs], [float(env.reached) for env in envs], group=G)
    assert spans2 == spans
    check_placement(output["advantages"], loss_mask(output), step_adv, spans)
    assert any(len(s) > 1 for s in spans), "SmolLM2 called the tool and played several turns"
    for env, s in zip(envs, spans):
        assert len(env.trace) - 1 in (len(s) - 1, len(s))  # one move per turn (the last turn's may be dropped)
    trainer.train()  # a full TRL step: generation, the tool loop, creditflow's credit, loss, update
    log = trainer.state.log_history[0]
    assert np.isfinite(log["loss"]) and "credit/graph_nodes" in log
