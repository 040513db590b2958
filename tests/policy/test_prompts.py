from creditflow.policy.prompts import PromptBuilder, format_response


def test_first_step_prompt_has_task_observation_and_actions():
    text = PromptBuilder("the Sokoban puzzle game").text("push boxes", "GRID0", [], ["up", "down"])
    assert "Your task is to: push boxes" in text
    assert "step 1" in text and "GRID0" in text
    assert "admissible actions of the current situation are: ['up', 'down']." in text
    assert "<think> </think>" in text and "<action> </action>" in text
    assert "Prior to this step" not in text


def test_history_window_keeps_last_h_pairs_and_counts_steps():
    pb = PromptBuilder("x", history_length=2)
    history = [("OBS1", "up"), ("OBS2", "down"), ("OBS3", "left")]
    text = pb.text("t", "OBS4", history, None)
    assert "already taken 3 step(s)" in text
    assert "most recent 2 observations" in text
    assert "OBS1" not in text and "OBS2" in text and "OBS3" in text
    assert "Action 2: down" in text and "Action 3: left" in text
    assert "step 4" in text and "OBS4" in text
    assert "admissible actions" not in text  # free-form env


def test_zero_history():
    text = PromptBuilder("x", history_length=0).text("t", "NOW", [("OLD", "up")], ["up"])
    assert "OLD" not in text and "NOW" in text


def test_response_format():
    assert format_response("up") == "<think></think><action>up</action>"
    assert format_response("up", "go") == "<think>go</think><action>up</action>"


# -- templates (policy.template) and layouts (rollout.history) --------------------------------------------

import pytest  # noqa: E402

from creditflow.policy.load import load_tokenizer  # noqa: E402
from creditflow.policy.prompts import ChatTemplate, Turn  # noqa: E402

PAPER_STEP_3 = (
    "You are an expert agent operating in x.\nYour task is to: t\nPrior to this step, you have already taken 2 "
    "step(s). Below are the most recent 2 observations and the corresponding actions you took:\n[Observation 1:\n"
    "O1\nAction 1: up]\n[Observation 2:\nO2\nAction 2: down]\nYou are now at step 3 and your current observation "
    "is:\nO3\nYour admissible actions of the current situation are: ['up', 'down'].\nNow it's your turn to take "
    "an action. You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <think> </think> tags. Once you've finished your reasoning, you should choose an admissible "
    "action for current step and present it within <action> </action> tags."
)


def test_paper_template_is_the_default_and_unchanged():
    pb = PromptBuilder("x")
    assert pb.template == "paper" and pb.history == "window"
    assert pb.text("t", "O3", [("O1", "up"), ("O2", "down")], ["up", "down"]) == PAPER_STEP_3


def test_compact_template_has_the_same_facts_in_fewer_words():
    history, adm = [("O1", "up"), ("O2", "down"), ("O3", "left")], ["up", "down"]
    compact = PromptBuilder("the Sokoban puzzle game", template="compact").text("push boxes", "O4", history, adm)
    paper = PromptBuilder("the Sokoban puzzle game").text("push boxes", "O4", history, adm)
    assert compact == ("The Sokoban puzzle game. Task: push boxes\nStep 2:\nO2\nAction: down\nStep 3:\nO3\n"
                       "Action: left\nStep 4:\nO4\nActions: up, down\nAnswer <think>...</think><action>...</action>.")
    assert len(compact) < len(paper) / 2
    first = PromptBuilder("x", template="compact").text("t", "O1", [], None)
    assert first == "X. Task: t\nStep 1:\nO1\nAnswer <think>...</think><action>...</action>."


@pytest.mark.parametrize("template", ["paper", "compact"])
def test_conversation_chat_alternates_observations_and_responses(template):
    pb = PromptBuilder("x", template=template, history="conversation")
    turns = [Turn("O1", ["up", "down"], "up", "<think>a</think><action>up</action>"),
             Turn("O2", ["up"], "down", "<think></think><action>down</action>")]
    chat = pb.chat("t", turns, "O3", ["left"])
    assert [m["role"] for m in chat] == ["user", "assistant", "user", "assistant", "user"]
    assert chat[0]["content"] == pb.text("t", "O1", [], ["up", "down"]) == pb.first_turn("t", "O1", ["up", "down"])
    assert [chat[1]["content"], chat[3]["content"]] == [t.response for t in turns]
    assert chat[2]["content"] == pb.next_turn(2, "O2", ["up"], ["up", "down"])
    assert chat[4]["content"] == pb.next_turn(3, "O3", ["left"], ["up"])
    assert "O3" in chat[4]["content"] and "3" in chat[4]["content"] and "left" in chat[4]["content"]
    same = pb.next_turn(3, "O3", ["up"], ["up"])
    assert ("up" in same) == (template == "paper")  # compact lists the actions only when they change
    assert "O1" not in chat[4]["content"]  # no window: the earlier steps are earlier messages
    window = PromptBuilder("x", template=template)
    assert window.chat("t", turns, "O3", ["left"]) == window.messages("t", "O3", [("O1", "up"), ("O2", "down")],
                                                                      ["left"])


def test_unknown_template_or_layout_is_refused():
    with pytest.raises(ValueError, match="template"):
        PromptBuilder("x", template="short")
    with pytest.raises(ValueError, match="layout"):
        PromptBuilder("x", history="full")


def test_chat_template_continuation_equals_the_rendered_chat(tiny_model_dir):
    """Appending sampled ids and ``continuation`` ids gives the template's own rendering of the chat, for
    a response that ended with eos and for one stopped before it (``</action>`` stop, length cut)."""
    tok = load_tokenizer(tiny_model_dir)
    chat = ChatTemplate(tok)
    assert chat.close[0] == tok.eos_token_id
    pb = PromptBuilder("x", template="compact", history="conversation")
    turns = [Turn("O1", ["up"], "up", "<think></think><action>up</action>"),
             Turn("O2", ["up"], "up", "<think>hm</think><action>left</action>")]
    ids = chat.encode(pb.chat("t", [], "O1", ["up"]))
    for step, (turn, with_eos) in enumerate(zip(turns, (True, False)), start=2):
        sampled = tok.encode(turn.response, add_special_tokens=False) + ([tok.eos_token_id] if with_eos else [])
        ids = ids + sampled + chat.continuation(sampled, pb.next_turn(step, "O%d" % step, ["up"], ["up"]))
    assert ids == chat.encode(pb.chat("t", turns, "O3", ["up"]))
