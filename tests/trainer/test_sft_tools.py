"""``creditflow sft --tools`` (issue 74 part 2): tool-calling demonstrations from an env's expert, a tokenizer that
renders and parses tool calls, and a written model TRL's environment_factory accepts and whose calls it parses."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import is_chat_template_prefix_preserving, parse_response, supports_tool_calling

from creditflow.envs import factory
from creditflow.policy.tiny import CHAT_TEMPLATE, train_tokenizer
from creditflow.policy.tools import TOOL_MARKUP, add_tool_calling
from creditflow.rollout.expert import expert_tool_conversations
from creditflow.trainer.sft import tool_calling_tokenizer, tool_examples

ROOT = Path(__file__).resolve().parents[2]
WALK = """
import random


class Walk:
    def reset(self, seed=None, **kwargs):
        self.pos, self.goal = 0, random.Random(seed).choice([-2, -1, 1, 2])
        return f"You are at 0; the goal is at {self.goal}. Say done there."

    def move(self, direction: str) -> str:
        '''Move one cell.

        Args:
            direction: left or right
        '''
        self.pos += 1 if direction == "right" else -1
        return f"You are at {self.pos}."

    def get_reward(self):
        return float(self.pos == self.goal)

    @property
    def success(self):
        return self.pos == self.goal

    def expert_actions(self):
        way = "right" if self.goal > self.pos else "left"
        return [f"move(direction={way!r})"] * abs(self.goal - self.pos) + ["done"]
"""


@pytest.fixture
def walk_module(tmp_path, monkeypatch):
    (tmp_path / "sft_tools_walk.py").write_text(WALK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sft_tools_walk", raising=False)
    return tmp_path


def test_expert_episodes_become_trls_tool_chats(walk_module):
    chats = expert_tool_conversations(factory("trl:sft_tools_walk:Walk"), [0, 1, 2])
    goal = int(chats[0][0]["content"].split("goal is at ")[1].split(".")[0])
    # TRL's prompt (an empty placeholder prompt + reset()'s text), then call, result, ..., the final answer
    assert chats[0][0] == {"role": "user", "content": f"You are at 0; the goal is at {goal}. Say done there."}
    way = "right" if goal > 0 else "left"
    calls = chats[0][1:-1:2]
    call = {"name": "move", "arguments": {"direction": way}}
    assert [c["tool_calls"][0]["function"] for c in calls] == [call] * abs(goal)
    assert [m["content"] for m in chats[0][2:-1:2]] == [f"You are at {i if goal > 0 else -i}." for i in
                                                        range(1, abs(goal) + 1)]
    assert chats[0][-1] == {"role": "assistant", "content": "done"}
    examples = tool_examples(chats)
    assert len(examples) == sum(len(c[1::2]) for c in chats)  # one example per assistant message
    assert examples[1]["prompt"] == chats[0][:3] and examples[1]["completion"] == [chats[0][3]]


def test_the_tiny_tokenizer_gets_a_template_trl_accepts_and_a_parser():
    tok = train_tokenizer(["move right left done You are at 1"] * 4, vocab_size=300, words=TOOL_MARKUP)
    assert tok.chat_template == CHAT_TEMPLATE and not supports_tool_calling(tok)  # the issue: TRL refuses it
    tool_calling_tokenizer(tok)
    assert supports_tool_calling(tok) and is_chat_template_prefix_preserving(tok)
    prompt = tok.apply_chat_template([{"role": "user", "content": "go"}], add_generation_prompt=True, tokenize=True,
                                     return_dict=True)["input_ids"]
    text = '<tool_call>\n{"name": "move", "arguments": {"direction": "left"}}\n</tool_call><|im_end|>'
    parsed = parse_response(tok, tok(text, add_special_tokens=False)["input_ids"], prefix=list(prompt))
    assert parsed["tool_calls"] == [{"type": "function", "function": {"name": "move",
                                                                      "arguments": {"direction": "left"}}}]
    assert tok.tokenize("<tool_call>") == ["<tool_call>"]


def test_a_template_that_already_calls_tools_is_kept():
    tok = add_tool_calling(train_tokenizer(["a b c"] * 4, vocab_size=300))
    tok.chat_template = tok.chat_template + "{#- the model's own #}"
    own = tok.chat_template
    assert tool_calling_tokenizer(tok).chat_template == own


def cli(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "creditflow", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["sft", "--tools", "--env", "sokoban", "sft.demos=1"], "is not a tool call"),
    (["sft", "--tools", "--env", "sokoban", "sft.demos=2"], "is not a tool call"),
    (["train", "--env", "trl:sft_tools_walk:Walk", "sft.tools=true"],
     "sft.tools=true makes a tool-calling model for TRL's environment_factory and is for `creditflow sft --tools`"),
])
def test_tools_where_they_cannot_apply_is_one_line(walk_module, args, needle):
    code, err = cli(*args, f"out_dir={walk_module / 'run'}", cwd=walk_module)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err, err
    assert not (walk_module / "run" / "sft_model").exists()


@pytest.mark.slow
def test_the_written_model_calls_the_tool_towards_the_goal(walk_module):
    """The model `sft --tools` writes (from a module in the current directory) answers with parseable calls
    that go the right way, and says done at the goal."""
    code, err = cli("sft", "--tools", "--env", "trl:sft_tools_walk:Walk", "--out", "run", "sft.demos=64",
                    "sft.epochs=20", "sft.batch_size=16", cwd=walk_module)
    assert code == 0, err
    model_dir = walk_module / "run" / "sft_model"
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    for goal in (-2, 1, 2):
        chat = [{"role": "user", "content": f"You are at 0; the goal is at {goal}. Say done there."}]
        pos = 0
        for _ in range(abs(goal) + 1):
            ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"]
            out = model.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)[0, len(ids):].tolist()
            reply = parse_response(tok, out, prefix=list(ids))
            if pos == goal:
                assert not reply.get("tool_calls") and reply["content"] == "done"
                break
            (call,) = reply["tool_calls"]
            assert call["function"] == {"name": "move",
                                        "arguments": {"direction": "right" if goal > 0 else "left"}}
            pos += 1 if goal > 0 else -1
            chat += [reply, {"role": "tool", "name": "move", "content": f"You are at {pos}."}]
