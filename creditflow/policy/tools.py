"""Tool calling for a ChatML policy, such as the built-in tiny one: a chat template and the parser that reads
its tool calls back (docs/trl.md, "Offline, end to end").

The built-in tiny policy's chat template (:data:`creditflow.policy.tiny.CHAT_TEMPLATE`) renders
``content`` only, so TRL's ``environment_factory`` refuses it ("The provided chat template does not support tool
calling"). :func:`add_tool_calling` gives a tokenizer

- :data:`TOOL_CHAT_TEMPLATE`: ChatML with the tool-call markup of the Qwen2.5 / Qwen3 family: an assistant
  turn's tool calls are ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` after its text, the
  tool results of a round are one user turn of ``<tool_response>\\n...\\n</tool_response>`` blocks. It renders
  every earlier message the same whatever follows (TRL's multi-turn tool loop needs that) and shows no tool list
  (the ``tools`` passed to it are not rendered: a model as small as the tiny one learns its tools from the
  demonstrations of ``creditflow sft --tools``, not from a schema in the prompt);
- :data:`RESPONSE_TEMPLATE`: the transformers ``response_template`` that parses such a turn back into
  ``{"role": "assistant", "content": ..., "tool_calls": [...]}`` (``tokenizer.parse_response``, which TRL calls
  on every generated turn). ``save_pretrained`` writes both with the tokenizer, so a saved model carries them.

Both are data for transformers' own machinery (Jinja chat templates, response templates); nothing here imports
TRL.
"""

from __future__ import annotations

import json
from typing import Any

# the markup of a tool call and of a tool result; the tiny tokenizer learns each as one token (--tools)
TOOL_MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

TOOL_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    # consecutive tool results share one user turn
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\n<tool_response>\n' + (message.content if message.content is string else message.content | tojson)"
    " + '\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant' }}{%- if message.content %}{{- '\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls %}"
    "{%- set call = call.function if call.function is defined else call %}"
    "{%- set arguments = call.arguments if call.arguments is string else call.arguments | tojson %}"
    "{{- '\n<tool_call>\n{\"name\": \"' + call.name + '\", \"arguments\": ' + arguments + '}\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

# transformers' response-template format (tokenizer.parse_response): after the assistant header, any number of
# <tool_call> JSON blocks, each a {"type": "function", "function": {...}} entry of tool_calls; the text is content
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def add_tool_calling(tokenizer):
    """Give ``tokenizer`` :data:`TOOL_CHAT_TEMPLATE` and :data:`RESPONSE_TEMPLATE` (in place; returned too).

    Meant for ChatML tokenizers (``<|im_start|>`` / ``<|im_end|>``), such as the tiny policy's; a model whose own
    chat template already renders tool calls keeps it (``creditflow sft --tools`` checks that first)."""
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def tool_call_message(name: str, arguments: dict, content: str = "") -> dict:
    """An assistant message that calls tool ``name`` with ``arguments`` (the shape TRL and transformers use)."""
    return {"role": "assistant", "content": content,
            "tool_calls": [{"type": "function", "function": {"name": name, "arguments": dict(arguments)}}]}


def tool_result_message(name: str, content: Any) -> dict:
    """The message that carries tool ``name``'s result (TRL puts ``str(result)`` there)."""
    return {"role": "tool", "name": name, "content": content if isinstance(content, str) else json.dumps(content)}


__all__ = ["RESPONSE_TEMPLATE", "TOOL_CHAT_TEMPLATE", "TOOL_MARKUP", "add_tool_calling", "tool_call_message",
           "tool_result_message"]
