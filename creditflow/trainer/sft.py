"""Supervised fine-tuning on expert trajectories (pi_SFT), with TRL's SFTTrainer.

Demonstrations come from the env's expert (:func:`creditflow.rollout.expert.expert_trajectories`). Each step becomes one conversational prompt/completion example: the
prompt is exactly the chat the rollout engine shows at that step in the run's layout (``window``: one user
message; ``conversation``: the chat so far, earlier expert responses as assistant turns), the completion
the expert response.
TRL's ``completion_only_loss`` puts the loss on the response tokens only (``sft.prompt_loss``: on the
prompt tokens too).

``sft.tools`` (``creditflow sft --tools``): the demonstrations are tool-calling chats instead
(:func:`creditflow.rollout.expert.expert_tool_conversations`), one example per assistant turn
(:func:`tool_examples`), and the tokenizer renders and parses tool calls (:func:`tool_calling_tokenizer`), so the
saved model is one TRL's ``environment_factory`` accepts and whose tool calls it parses (docs/trl.md).
"""

from __future__ import annotations

import json
from dataclasses import replace

import trl
from trl.chat_template_utils import add_response_schema, supports_tool_calling

from creditflow.config import SFTConfig
from creditflow.errors import UserError
from creditflow.policy import lora as policy_lora
from creditflow.policy.prompts import PromptBuilder, Turn
from creditflow.policy.tools import add_tool_calling
from creditflow.rollout.trajectory import Trajectory
from creditflow.trainer.trl_runner import TRLOptions, TRLStage, run_trl
from creditflow.world import current


def demo_examples(trajectories: list[Trajectory], prompts: PromptBuilder) -> list[dict]:
    """One TRL conversational prompt/completion example per expert step."""
    examples = []
    for traj in trajectories:
        turns: list[Turn] = []
        for step in traj.steps:
            adm = step.info.get("admissible_actions")
            messages = prompts.chat(step.info.get("task", ""), turns, step.observation, adm)
            examples.append({"prompt": messages,
                             "completion": [{"role": "assistant", "content": step.response}]})
            turns.append(Turn(step.observation, adm, step.action, step.response))
    return examples


def tool_examples(conversations: list[list[dict]]) -> list[dict]:
    """One TRL conversational prompt/completion example per assistant message of each chat: the chat before it is
    the prompt, the message the completion (its tool call, or the final answer)."""
    return [{"prompt": [dict(m) for m in chat[:k]], "completion": [dict(message)]}
            for chat in conversations for k, message in enumerate(chat) if message["role"] == "assistant"]


def tool_corpus(conversations: list[list[dict]]) -> list[str]:
    """Text for the tiny tokenizer of a tool-calling policy: each message's text and each call as the JSON the
    chat template writes."""
    texts = []
    for chat in conversations:
        for message in chat:
            if message.get("content"):
                texts.append(str(message["content"]))
            for call in message.get("tool_calls") or []:
                fn = call.get("function", call)
                texts.append(json.dumps({"name": fn["name"], "arguments": fn["arguments"]}))
    return texts


def tool_calling_tokenizer(tokenizer, what: str = "the model"):
    """``tokenizer``, able to render and parse tool calls (in place). A chat template that already renders a
    tool-calling conversation (TRL's own check) is kept, with its ``response_template`` or the parser TRL knows
    for it; any other (the tiny policy's ChatML) gets creditflow's tool template and parser
    (:func:`creditflow.policy.tools.add_tool_calling`)."""
    if not supports_tool_calling(tokenizer):
        return add_tool_calling(tokenizer)
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError:
            raise UserError(f"sft.tools: {what}'s chat template renders tool calls, but neither it nor TRL has a "
                            "parser for them (a tokenizer response_template); set one, or use a model whose "
                            "template TRL knows") from None
    return tokenizer


def prompt_lengths(examples: list[dict], tokenizer) -> list[int]:
    """Tokens of each example's prompt as the policy sees it (chat template with the generation prompt)."""
    lengths = []
    for example in examples:
        ids = tokenizer.apply_chat_template(example["prompt"], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        lengths.append(len(ids))
    return lengths


def check_max_length(lengths: list[int], max_length: int) -> int:
    """How many examples TRL would drop because their prompt alone fills ``max_length`` (it truncates
    prompt + completion to ``max_length`` and drops examples with no completion token left); a one-line
    UserError when that is every example."""
    dropped = sum(1 for n in lengths if n >= max_length)
    if lengths and dropped == len(lengths):
        raise UserError(f"sft.max_length={max_length} leaves no response token to train on: every demonstration "
                        f"prompt is at least {min(lengths)} tokens; set sft.max_length above {max(lengths)}")
    return dropped


def train_sft(model, tokenizer, examples: list[dict], cfg: SFTConfig, options: TRLOptions) -> dict:
    """Fine-tune ``model`` in place with TRL's SFTTrainer (loss on completion tokens only, unless
    ``cfg.prompt_loss``), settings ``cfg`` (``cfg.sft``): cosine schedule after a 5% warmup, no weight decay.
    ``options``: the run's directory, seed, LoRA, autocast, callbacks and ``save_to`` (:class:`TRLOptions`).

    ``options.lora`` (``policy.lora``, when enabled): TRL trains a LoRA adapter on ``model``, which is then merged
    into ``model``'s weights, so ``model`` is a plain model afterwards, as with full fine-tuning (and
    ``save_to`` gets the merged model, not the adapter TRL would save)."""
    if not examples:
        raise UserError("SFT: no demonstrations (the expert won no episode)")
    lora, save_to = options.lora, options.save_to
    peft_config = policy_lora.peft_config(lora) if lora is not None and lora.enabled else None
    stage = TRLStage("sft", trl.SFTTrainer, trl.SFTConfig, settings=dict(
        num_train_epochs=cfg.epochs, learning_rate=cfg.lr, per_device_train_batch_size=cfg.batch_size,
        lr_scheduler_type="cosine", warmup_steps=0.05,  # < 1: a ratio of the total steps (transformers >= 5)
        max_length=cfg.max_length, completion_only_loss=not cfg.prompt_loss, packing=False, logging_steps=10,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random"))
    trl_options = replace(options, save_to=None) if peft_config is not None else options  # merged and saved below
    run = run_trl(stage, model, tokenizer, examples, trl_options, peft_config=peft_config)
    if peft_config is not None:
        run.model.merge_and_unload()  # the adapter's layers are replaced, in ``model``, by merged plain ones
        if save_to is not None and current().main:
            model.save_pretrained(save_to)
            tokenizer.save_pretrained(save_to)
    return {"sft/train_loss": run.train_loss, "sft/examples": len(examples), "sft/steps": run.steps,
            "sft/history": run.history}
