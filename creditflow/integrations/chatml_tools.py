"""Tool calling for ChatML models whose own chat template has none, for TRL's ``environment_factory``.

TRL's ``GRPOTrainer`` refuses tools (and so ``environment_factory``) with a chat template that cannot render a
tool call and a tool response. Small ChatML instruct models such as SmolLM2 ship such a template: it renders
``<|im_start|>role\\ncontent<|im_end|>\\n`` and nothing else. :func:`with_tool_calling` gives the tokenizer a
ChatML template that also renders

- the tools offered, as JSON schemas inside ``<tools>...</tools>`` in the system turn (the model's own default
  system text first, when its template has one and the chat none);
- an assistant's tool calls as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks;
- tool responses as a user turn of ``<tool_response>\\n...\\n</tool_response>`` blocks,

the markup TRL's Qwen3 response parser (``trl.chat_template_utils.qwen3_template``) reads back, which is set as
the tokenizer's response parser. The template renders every earlier message the same whatever follows (prefix
preserving), as TRL's multi-turn tool loop requires. A template that already supports tools is kept as it is.
"""

from __future__ import annotations

import re

import transformers
from packaging.version import Version
from trl.chat_template_utils import qwen3_schema, qwen3_template, supports_tool_calling

from creditflow.errors import UserError

_OPEN, _CLOSE = "<|im_start|>", "<|im_end|>"

# The system turn: the chat's own system message, else the model's default system text; then the tools.
_TEMPLATE = (
    "{%- set first = messages[0] if messages else none %}"
    "{%- set system = first.content if first and first.role == 'system' else default_system %}"
    "{%- if system or tools %}"
    "{{- '<|im_start|>system\\n' }}{%- if system %}{{- system }}{%- endif %}"
    "{%- if tools %}{%- if system %}{{- '\\n\\n' }}{%- endif %}"
    "{{- 'You can call these tools; each line is one tool as a JSON schema:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\nTo call a tool, answer with one block per call:\\n<tool_call>\\n'"
    " + '{\"name\": \"the tool\", \"arguments\": {\"argument\": \"value\"}}\\n</tool_call>' }}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' }}{%- if message.content %}{{- message.content + '\\n' }}{%- endif %}"
    "{%- for call in message.tool_calls %}{%- set call = call.function if call.function is defined else call %}"
    "{%- if not loop.first %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + call.name + '\", \"arguments\": ' }}"
    "{{- (call.arguments if call.arguments is string else call.arguments | tojson) + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def chatml_tool_template(default_system: str = "") -> str:
    """The ChatML template with tool calls and tool responses (see the module docstring); ``default_system``:
    the system text of a chat that has no system message (empty: no system turn unless tools are offered)."""
    return "{%- set default_system = " + _jinja_string(default_system) + " %}" + _TEMPLATE


def default_system_text(tokenizer) -> str:
    """The system text the tokenizer's chat template adds to a chat without a system message ('' if none)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    found = re.match(re.escape(_OPEN) + r"system\n(.*?)" + re.escape(_CLOSE), text, re.S)
    return found.group(1) if found else ""


def with_tool_calling(tokenizer):
    """``tokenizer`` ready for TRL's tools: its own chat template when that supports tool calling, else (a
    ChatML model) :func:`chatml_tool_template` with the model's default system text, and TRL's parser for the
    ``<tool_call>`` markup as its response parser. Changes the tokenizer in place and returns it; a template
    that is neither is a one-line UserError."""
    if getattr(tokenizer, "chat_template", None) and supports_tool_calling(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) \
        if getattr(tokenizer, "chat_template", None) else ""
    if _OPEN not in vocab or _CLOSE not in vocab or f"{_OPEN}user\nx{_CLOSE}" not in rendered:
        raise UserError("this tokenizer's chat template is not ChatML and does not support tool calling; give it a "
                        "chat template that renders tool calls and tool responses (TRL's environment_factory needs one)")
    tokenizer.chat_template = chatml_tool_template(default_system_text(tokenizer))
    if Version(transformers.__version__) >= Version("5.13"):
        tokenizer.response_template = qwen3_template
    else:  # older transformers read the legacy response schema
        tokenizer.response_schema = qwen3_schema
    return tokenizer


def _jinja_string(text: str) -> str:
    """``text`` as a Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
