"""Parse the executed action out of a model response: ``<think>…</think><action>…</action>``.

Never raises: unparseable or non-admissible output comes back as ``valid=False`` and the caller
executes it as an invalid action (no move, penalty).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ACTION = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAction:
    action: str  # what is sent to the env (the admissible spelling when matched)
    valid: bool
    reason: str = ""  # why invalid


def parse_response(response: str, admissible_actions: list[str] | None = None) -> ParsedAction:
    """Extract the action. Exactly one ``<action>`` block is required; ``<think>`` is optional but, if
    opened, must be closed before the action. With ``admissible_actions`` the action must match one of
    them (case- and surrounding-whitespace-insensitive)."""
    if not isinstance(response, str):
        return ParsedAction("", False, "response is not text")
    found = _ACTION.findall(response)
    if not found:
        return ParsedAction(response.strip()[:200], False, "no <action>...</action> block")
    if len(found) > 1:
        return ParsedAction(found[-1].strip()[:200], False, "more than one <action> block")
    if "<think>" in response.lower():
        head = response.lower().split("<action>")[0]
        if "</think>" not in head:
            return ParsedAction(found[0].strip()[:200], False, "<think> not closed before <action>")
    action = " ".join(found[0].split())
    if not action:
        return ParsedAction("", False, "empty action")
    if admissible_actions is None:
        return ParsedAction(action, True)
    lowered = action.lower()
    for candidate in admissible_actions:
        if " ".join(candidate.split()).lower() == lowered:
            return ParsedAction(candidate, True)
    return ParsedAction(action, False, "action not admissible")
