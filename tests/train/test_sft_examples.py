"""SFT demonstrations in the run's multi-turn layout: the prompt is the chat the engine shows at that step."""

from creditflow.envs import make
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.expert import expert_trajectories
from creditflow.train.sft import demo_examples


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
