import pytest

from creditflow.policy.parsing import parse_response

ADM = ["up", "down", "left", "right"]


@pytest.mark.parametrize("text,action,valid", [
    ("<think>box is below</think><action>down</action>", "down", True),
    ("<action> Up </action>", "up", True),
    ("<think>x</think>\n<action>LEFT</action><|im_end|>", "left", True),
    ("<action>jump</action>", "jump", False),
    ("down", "down", False),
    ("", "", False),
    ("<action></action>", "", False),
    ("<action>up</action><action>down</action>", "down", False),
    ("<think>never closed <action>up</action>", "up", False),
    ("<action>up", "<action>up", False),
    ("\x00\x01<action>right</action>", "right", True),
])
def test_parse_action(text, action, valid):
    parsed = parse_response(text, ADM)
    assert parsed.valid is valid
    assert parsed.action == action
    if not valid:
        assert parsed.reason


def test_free_form_actions_without_admissible_list():
    parsed = parse_response("<action>SELECT  *\nFROM t</action>", None)
    assert parsed.valid and parsed.action == "SELECT * FROM t"


def test_never_raises_on_garbage():
    for junk in [None, 3, "<<<>>>", "<action>" * 50, "\ud800"]:
        assert parse_response(junk, ADM).valid is False
