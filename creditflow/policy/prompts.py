"""Prompt construction following the papers' templates (CRPS App. C; verl-agent / GiGPO / RewardFlow).

Each step's prompt holds (i) the task instruction, (ii) the step count, (iii) the last H observation /
action pairs (H = 2 default), (iv) the current observation and (v) the admissible actions, and asks for
``<think>...</think><action>...</action>``. It is sent as one user message through the tokenizer's chat
template.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HISTORY = 2

_TEMPLATE_HEAD = "You are an expert agent operating in {environment}.\nYour task is to: {task}\n"
_TEMPLATE_FIRST = "You are now at step 1 and your current observation is:\n{observation}\n"
_TEMPLATE_LATER = (
    "Prior to this step, you have already taken {step_count} step(s). Below are the most recent "
    "{history_length} observations and the corresponding actions you took:\n{history}\n"
    "You are now at step {current_step} and your current observation is:\n{observation}\n"
)
_TEMPLATE_ACTIONS = "Your admissible actions of the current situation are: [{actions}].\n"
_TEMPLATE_TAIL = (
    "Now it's your turn to take an action. You should first reason step-by-step about the current "
    "situation. This reasoning process MUST be enclosed within <think> </think> tags. Once you've "
    "finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags."
)


@dataclass
class PromptBuilder:
    environment: str = "a text environment"
    history_length: int = DEFAULT_HISTORY

    def text(self, task: str, observation: str, history: list[tuple[str, str]],
             admissible_actions: list[str] | None) -> str:
        """``history`` = all previous (observation, action) pairs of the episode, oldest first."""
        out = _TEMPLATE_HEAD.format(environment=self.environment, task=task)
        step = len(history)
        if step == 0:
            out += _TEMPLATE_FIRST.format(observation=observation)
        else:
            recent = history[-self.history_length:] if self.history_length > 0 else []
            lines = []
            for i, (obs, act) in enumerate(recent, start=step - len(recent) + 1):
                lines.append(f"[Observation {i}:\n{obs}\nAction {i}: {act}]")
            out += _TEMPLATE_LATER.format(step_count=step, history_length=len(recent),
                                          history="\n".join(lines), current_step=step + 1,
                                          observation=observation)
        if admissible_actions:
            out += _TEMPLATE_ACTIONS.format(actions=", ".join(f"'{a}'" for a in admissible_actions))
        return out + _TEMPLATE_TAIL

    def messages(self, task: str, observation: str, history: list[tuple[str, str]],
                 admissible_actions: list[str] | None) -> list[dict]:
        return [{"role": "user", "content": self.text(task, observation, history, admissible_actions)}]


def format_response(action: str, thought: str = "") -> str:
    """The assistant message the policy is trained to produce."""
    return f"<think>{thought}</think><action>{action}</action>"


def environment_description(env) -> str:
    return getattr(env, "description", None) or f"the {getattr(env, 'name', 'text')} environment"
