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
