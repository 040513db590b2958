"""A multi-turn task for TRL's GRPOTrainer on the tiny policy, both ways TRL runs episodes: a walk on a line
(start at 0, the goal at ``GOAL``), one move per assistant turn, success when the walker reaches the goal.

- ``environment_factory``: :class:`WalkEnv`, whose ``move`` tool TRL exposes to the model; it has a
  ``state_key()`` method, a ``success`` property and a ``get_reward()`` (TRL's environment-owned reward).
  The tiny policy learns to call the tool in a few seconds of SFT (:func:`tool_calling_policy`), with
  creditflow's tool-calling chat template and parser (:func:`creditflow.policy.tools.add_tool_calling`; the
  supported route for users is ``creditflow sft --tools``, docs/trl.md).
- ``rollout_func``: :func:`walk_rollout_func`, a multi-turn rollout that generates each turn with the
  trainer's model and appends the environment's feedback as tokens with ``env_mask`` 0; it returns each
  turn's state key and the outcome as extra fields.

Used by tests/integrations/test_trl.py and benchmarks/trl_credit_overhead.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

GOAL = 2
PROMPT_WORDS = "abcdefgh"  # prompts are "walk <word>" (the SFT data's, so the tool-calling policy knows them)

class WalkEnv:
    """TRL ``environment_factory`` environment: a walk on a line, ``move`` is the model's tool."""

    def __init__(self):
        self.pos = 0
        self.reached = False

    def reset(self, **kwargs) -> str:
        self.pos, self.reached = 0, False
        return f" Start at 0; the goal is at {GOAL}."

    def move(self, d: str) -> str:
        """Move one cell along the line.

        Args:
            d: r (right) or l (left)
        """
        self.pos = max(0, self.pos + (1 if d == "r" else -1))
        self.reached = self.reached or self.pos == GOAL
        return f"at {self.pos}"

    def state_key(self) -> str:
        return f"pos={self.pos}"

    @property
    def success(self) -> bool:
        return self.reached

    def get_reward(self) -> float:
        return float(self.reached)


def tool_tokenizer(model_dir: str | Path):
    """The tiny policy's tokenizer with creditflow's tool-calling chat template and parser."""
    from transformers import AutoTokenizer

    from creditflow.policy.tools import add_tool_calling

    return add_tool_calling(AutoTokenizer.from_pretrained(str(model_dir)))


def _tool_call(d: str) -> dict:
    from creditflow.policy.tools import tool_call_message

    return tool_call_message("move", {"d": d})


def tool_calling_policy(model_dir: str | Path, out_dir: str | Path, steps: int = 60, seed: int = 0) -> Path:
    """SFT the tiny policy at ``model_dir`` to answer every turn with a ``move`` call (direction at random) and
    save it with :func:`tool_tokenizer`'s tokenizer to ``out_dir``."""
    from transformers import AutoModelForCausalLM

    rng = random.Random(seed)
    torch.manual_seed(seed)
    tok = tool_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    chats = []
    for _ in range(32):
        messages = [{"role": "user", "content": f"walk {rng.choice(PROMPT_WORDS)} Start at 0; the goal is at {GOAL}."}]
        for _ in range(3):
            messages += [_tool_call(rng.choice("lr")), {"role": "tool", "name": "move", "content": f"at {rng.randint(0, 3)}"}]
        chats.append(list(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]))
    width = max(map(len, chats))
    ids = torch.tensor([c + [tok.pad_token_id] * (width - len(c)) for c in chats])
    labels = torch.where(torch.arange(width)[None, :] < torch.tensor([len(c) for c in chats])[:, None], ids, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        pick = torch.randint(0, len(chats), (8,))
        model(input_ids=ids[pick], labels=labels[pick]).loss.backward()
        opt.step()
        opt.zero_grad()
    out = Path(out_dir)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def walk_rollout_func(max_turns: int = 3, new_tokens: int = 4):
    """A TRL ``rollout_func``: one walk per prompt; each turn generates ``new_tokens`` tokens with the trainer's
    model (the first token's parity is the move: even = right), then the feedback ``at N`` follows as a user
    message with ``env_mask`` 0. Returns TRL's fields plus ``state_keys`` (one per turn) and ``success``."""

    def rollout_func(prompts, trainer):
        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        out = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "state_keys", "success")}
        for prompt in prompts:
            prompt_ids = list(tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                      return_dict=True)["input_ids"])
            pos, won, ids, mask, logprobs, keys = 0, False, [], [], [], []
            for turn in range(max_turns):
                keys.append(f"pos={pos}")
                context = torch.tensor([prompt_ids + ids])
                with torch.no_grad():
                    gen = model.generate(context, attention_mask=torch.ones_like(context), max_new_tokens=new_tokens,
                                         do_sample=True, output_scores=True, return_dict_in_generate=True,
                                         pad_token_id=tok.pad_token_id)
                new = gen.sequences[0, context.size(1):].tolist()
                logprobs += [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(gen.scores, new)]
                ids += new
                mask += [1] * len(new)
                pos = max(0, pos + (1 if new[0] % 2 == 0 else -1))
                won = pos == GOAL
                if won or turn == max_turns - 1:
                    break
                feedback = tok(f"<|im_start|>user\nat {pos}<|im_end|>\n<|im_start|>assistant\n",
                               add_special_tokens=False)["input_ids"]
                ids += feedback
                mask += [0] * len(feedback)
                logprobs += [0.0] * len(feedback)
            for key, value in zip(out, (prompt_ids, ids, logprobs, mask, keys, won)):
                out[key].append(value)
        return out

    return rollout_func


def success_reward(completions, success, **kwargs) -> list[float]:
    """TRL reward function for :func:`walk_rollout_func`: 1 for a walk that reached the goal."""
    return [float(s) for s in success]
