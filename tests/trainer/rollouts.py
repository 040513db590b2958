"""Real rollouts of the tiny policy in both layouts, shared by the rows, forward and update tests."""

from __future__ import annotations

import torch

from creditflow.envs import make
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.prompts import ChatTemplate, PromptBuilder
from creditflow.rollout.engine import EpisodeRules, RolloutEngine, TaskSpec


def conversation_rollout(model, tok, seed=0):
    """Two 3-step Sokoban episodes of the (untrained) tiny policy in the conversation layout."""
    chat = ChatTemplate(tok)
    engine = RolloutEngine(HFBackend(model, tok), chat.encode, lambda: make("sokoban"),
                           PromptBuilder("sokoban", template="compact", history="conversation"),
                           SamplingParams(max_new_tokens=6), EpisodeRules(max_steps=3), chat=chat)
    torch.manual_seed(seed)
    trajs = engine.rollout([TaskSpec("sokoban/1", 1)], 2)
    for i, traj in enumerate(trajs):  # some advantages, one of them zero
        for t, step in enumerate(traj.steps):
            step.advantage = [1.0, -0.5, 0.0][t] * (1 if i == 0 else -1)
    return trajs


def window_rollout(model, tok, seed=0, group=4):
    """A group of 4-step Sokoban episodes of one level in the window + paper layout: the first turns
    repeat one prompt, and every prompt starts with the template's instruction."""
    chat = ChatTemplate(tok)
    engine = RolloutEngine(HFBackend(model, tok), chat.encode, lambda: make("sokoban"), PromptBuilder("sokoban"),
                           SamplingParams(max_new_tokens=6), EpisodeRules(max_steps=4), chat=chat)
    torch.manual_seed(seed)
    trajs = engine.rollout([TaskSpec("sokoban/3", 3)], group)
    for i, traj in enumerate(trajs):
        for t, step in enumerate(traj.steps):
            step.advantage = (-1.0) ** (i + t) * (t + 1) / 4
    return trajs
