"""Prompt construction: two templates (``paper``, ``compact``) in two multi-turn layouts (``window``,
``conversation``).

Templates (``policy.template``):

* ``paper`` (default) follows the papers' template (CRPS App. C; verl-agent / GiGPO / RewardFlow): (i) the
  task instruction, (ii) the step count, (iii) the last H observation / action pairs (H = 2 default), (iv)
  the current observation and (v) the admissible actions, and it asks for
  ``<think>...</think><action>...</action>``.
* ``compact`` holds the same facts in a few words (no role-play preamble, one-line instruction), sized
  for the tiny from-scratch policy: a Sokoban prompt at step 15 is 327 tokens instead of 455, a
  conversation turn half of ``paper``'s.

Layouts (``rollout.history``):

* ``window`` (default, the papers'): every turn is one fresh user message with the last H pairs.
* ``conversation``: a growing chat. The first user message holds the task, the first observation and the
  instruction; every later turn adds the policy's own response as an assistant message and the next
  observation (with the step count and admissible actions) as a user message, so turn t's prompt is a
  prefix of turn t+1's. ``history_length`` does not apply (the whole episode is in the chat).

:class:`ChatTemplate` turns messages into token ids with the tokenizer's chat template, and gives the ids
that continue a conversation after a sampled response (the rollout engine appends them to the sampled
ids instead of re-tokenizing the text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

DEFAULT_HISTORY = 2

Template = Literal["paper", "compact"]
History = Literal["window", "conversation"]
TEMPLATES = ("paper", "compact")
HISTORIES = ("window", "conversation")

_TEMPLATE_HEAD = "You are an expert agent operating in {environment}.\nYour task is to: {task}\n"
_TEMPLATE_FIRST = "You are now at step 1 and your current observation is:\n{observation}\n"
_TEMPLATE_LATER = (
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took:\n{history}\n"
    "You are now at step {current_step} and your current observation is:\n{observation}\n"
)
_TEMPLATE_NOW = "You are now at step {current_step} and your current observation is:\n{observation}\n"
_TEMPLATE_ACTIONS = "Your admissible actions of the current situation are: [{actions}].\n"
_TEMPLATE_TAIL = (
    "Now it's your turn to take an action. You should first reason step-by-step about the current "
    "situation. This reasoning process MUST be enclosed within <think> </think> tags. Once you've "
    "finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags."
)

_COMPACT_HEAD = "{environment}. Task: {task}\n"
_COMPACT_PAST = "Step {step}:\n{observation}\nAction: {action}\n"
_COMPACT_NOW = "Step {step}:\n{observation}\n"
_COMPACT_ACTIONS = "Actions: {actions}\n"
_COMPACT_TAIL = "Answer <think>...</think><action>...</action>."


class Turn(NamedTuple):
    """One past step as prompts need it: what was shown, what the policy said, what was executed."""

    observation: str
    admissible_actions: list[str] | None
    action: str  # the parsed action as the window history shows it
    response: str  # the assistant message of the conversation layout


@dataclass
class PromptBuilder:
    environment: str = "a text environment"
    history_length: int = DEFAULT_HISTORY
    template: Template = "paper"
    history: History = "window"

    def __post_init__(self):
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown prompt template {self.template!r}; use one of {', '.join(TEMPLATES)}")
        if self.history not in HISTORIES:
            raise ValueError(f"unknown history layout {self.history!r}; use one of {', '.join(HISTORIES)}")

    @property
    def conversation(self) -> bool:
        return self.history == "conversation"

    # -- window layout ------------------------------------------------------------------------------
    def text(self, task: str, observation: str, history: list[tuple[str, str]],
             admissible_actions: list[str] | None) -> str:
        """The window prompt; ``history`` = all previous (observation, action) pairs, oldest first."""
        step = len(history)
        recent = history[-self.history_length:] if self.history_length > 0 and step else []
        if self.template == "compact":
            out = _COMPACT_HEAD.format(environment=_capitalised(self.environment), task=task)
            for i, (obs, act) in enumerate(recent, start=step - len(recent) + 1):
                out += _COMPACT_PAST.format(step=i, observation=obs, action=act)
            return out + _COMPACT_NOW.format(step=step + 1, observation=observation) + \
                self._actions(admissible_actions) + _COMPACT_TAIL
        out = _TEMPLATE_HEAD.format(environment=self.environment, task=task)
        if step == 0:
            out += _TEMPLATE_FIRST.format(observation=observation)
        else:
            lines = []
            for i, (obs, act) in enumerate(recent, start=step - len(recent) + 1):
                lines.append(f"[Observation {i}:\n{obs}\nAction {i}: {act}]")
            out += _TEMPLATE_LATER.format(step_count=step, history_length=len(recent),
                                          history="\n".join(lines), current_step=step + 1,
                                          observation=observation)
        return out + self._actions(admissible_actions) + _TEMPLATE_TAIL

    def messages(self, task: str, observation: str, history: list[tuple[str, str]],
                 admissible_actions: list[str] | None) -> list[dict]:
        """The window layout's chat: one user message."""
        return [{"role": "user", "content": self.text(task, observation, history, admissible_actions)}]

    # -- conversation layout ------------------------------------------------------------------------
    def first_turn(self, task: str, observation: str, admissible_actions: list[str] | None) -> str:
        """The conversation's first user message (the window prompt of step 1)."""
        return self.text(task, observation, [], admissible_actions)

    def next_turn(self, step: int, observation: str, admissible_actions: list[str] | None,
                  previous_actions: list[str] | None = None) -> str:
        """The user message of step ``step`` (>= 2): the step count, the observation and the admissible
        actions (``compact`` lists them only when they differ from the previous step's,
        ``previous_actions``: the chat above already shows them)."""
        if self.template == "compact":
            shown = admissible_actions if admissible_actions != previous_actions else None
            return (_COMPACT_NOW.format(step=step, observation=observation) + self._actions(shown)).rstrip()
        return _TEMPLATE_NOW.format(current_step=step, observation=observation) + \
            self._actions(admissible_actions) + _TEMPLATE_TAIL

    # -- either layout ------------------------------------------------------------------------------
    def chat(self, task: str, turns: list[Turn], observation: str,
             admissible_actions: list[str] | None) -> list[dict]:
        """The chat the policy is shown after ``turns`` (the episode so far), in this builder's layout."""
        if not self.conversation:
            return self.messages(task, observation, [(t.observation, t.action) for t in turns], admissible_actions)
        shown = [*turns, Turn(observation, admissible_actions, "", "")]
        out = [{"role": "user", "content": self.first_turn(task, shown[0].observation, shown[0].admissible_actions)}]
        for step, (before, now) in enumerate(zip(shown, shown[1:]), start=2):
            out.append({"role": "assistant", "content": before.response})
            out.append({"role": "user", "content": self.next_turn(step, now.observation, now.admissible_actions,
                                                                  before.admissible_actions)})
        return out

    def _actions(self, admissible_actions: list[str] | None) -> str:
        if not admissible_actions:
            return ""
        if self.template == "compact":
            return _COMPACT_ACTIONS.format(actions=", ".join(admissible_actions))
        return _TEMPLATE_ACTIONS.format(actions=", ".join(f"'{a}'" for a in admissible_actions))


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def format_response(action: str, thought: str = "") -> str:
    """The assistant message the policy is trained to produce."""
    return f"<think>{thought}</think><action>{action}</action>"


def name_of_env(env) -> str:
    """The env's ``name``, else its class name (an env of a plug-in may have no ``name``)."""
    name = getattr(env, "name", None)
    return name if isinstance(name, str) and name else type(env).__name__


def environment_description(env) -> str:
    """What the prompt calls the env: its ``description``, else ``the <name> environment``."""
    return getattr(env, "description", None) or f"the {name_of_env(env)} environment"


def chat_ids(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> list[int]:
    """``messages`` as token ids through the tokenizer's chat template."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    return list(ids)


class ChatTemplate:
    """A tokenizer's chat template at the token level, for the conversation layout.

    ``continuation(response_ids, text)`` gives the ids that follow a sampled response when the chat goes
    on with a user message ``text``: whatever part of the assistant turn's closing the response did not
    emit itself (ChatML: ``<|im_end|>\\n``, or only ``\\n`` after a response that ended with
    ``<|im_end|>``), the user turn, and the next assistant turn's generation prompt. They are read off the
    template by rendering a reference chat with and without the user turn, so the conversation built by
    appending them equals the template's rendering of the same chat (tested).
    """

    _USER, _ASSISTANT = "x", "y"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        opened = chat_ids(tokenizer, [self._ref()[0]])
        self._ref_ids = chat_ids(tokenizer, self._ref(), add_generation_prompt=False)
        content = tokenizer.encode(self._ASSISTANT, add_special_tokens=False)
        assistant = self._ref_ids[len(opened):]
        if self._ref_ids[:len(opened)] != opened or assistant[:len(content)] != content:
            raise ValueError("the chat template does not render an assistant turn as its content followed by a "
                             "closing; the conversation layout needs one that does (e.g. ChatML)")
        self.close = assistant[len(content):]  # ids that end an assistant turn

    def _ref(self) -> list[dict]:
        return [{"role": "user", "content": self._USER}, {"role": "assistant", "content": self._ASSISTANT}]

    def encode(self, messages: list[dict]) -> list[int]:
        """A whole chat as ids, with the generation prompt of the next assistant turn."""
        return chat_ids(self.tokenizer, messages)

    def user_turn(self, text: str) -> list[int]:
        """The ids of a user turn ``text`` plus the next generation prompt, after a closed assistant turn."""
        ids = chat_ids(self.tokenizer, [*self._ref(), {"role": "user", "content": text}])
        if ids[:len(self._ref_ids)] != self._ref_ids:
            raise ValueError("the chat template re-renders earlier turns when a turn is added; the "
                             "conversation layout needs one whose chats grow by appending")
        return ids[len(self._ref_ids):]

    def continuation(self, response_ids: list[int], text: str) -> list[int]:
        """What follows ``response_ids`` (as sampled) in the chat when the next user message is ``text``."""
        done = next((k for k in range(len(self.close), 0, -1) if response_ids[-k:] == self.close[:k]), 0)
        return self.close[done:] + self.user_turn(text)
