"""Qwen-Agent's reading of `<tool_call>` blocks (NousFnCallPrompt.postprocess_fncall_messages, QwenLM/Qwen-Agent
@ d04611b, `qwen_agent/llm/fncall_prompts/nous_fncall_prompt.py`), used by its Qwen3-VL zoom.

Only the text after the last `</think>` is read when the text thinks (none of it while a `<think>` is open).
Each block is read with JSON5; one that does not parse falls back to Qwen-Agent's string search for
`"name": "…", "` and `"arguments": …` (a block without `</tool_call>` goes there directly, and is kept only if
a name was found). A parsed object needs both `name` and `arguments`, whose JSON text the tool then reads
(`toolserver.arguments`). Nothing is refused here: what the model wrote reaches the tool, whose checks answer
in Qwen-Agent's words. Results go back as a `tool` message holding what the tool returned (its image alone on
success).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toolserver.arguments import json5_loads
from toolserver.formats.base import CallFormat, Parsed, ParsedCall
from toolserver.messages import image_part
from toolserver.models import ToolResult


def _extract(text: str) -> tuple[str, str]:
    """Qwen-Agent's fallback for a tool call it cannot parse: the name between `"name": "` and the next
    `", "`, and everything after `"arguments": ` less its last character (the closing brace)."""
    name, arguments = "", ""
    name_at, args_at = text.find('"name": "'), text.find('"arguments": ')
    if name_at > 0:
        rest = text[name_at + len('"name": "'):]
        end = rest.find('", "')
        if end > -1:
            name = rest[:end]
    if args_at > 0:
        arguments = text[args_at + len('"arguments": '):]
    arguments = arguments.strip()
    return name, arguments[:-1] if len(arguments) > 2 else ""


class QwenAgent(CallFormat):
    name = "qwen-agent"
    description = "Qwen-Agent's <tool_call> blocks read with JSON5 and its fallbacks; a tool message per call."

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        if "<think>" in text:
            if "</think>" not in text:
                return out
            text = text.split("</think>")[-1]
        for segment in text.split("<tool_call>")[1:]:
            if not segment.strip():
                continue
            if "</tool_call>" not in segment:
                name, arguments = _extract(segment)
                if name:
                    out.calls.append(ParsedCall(name, arguments))
                continue
            block = segment.split("</tool_call>")[0].strip()
            try:
                call = json5_loads(block)
            except Exception:  # the reference catches everything here and falls back to the string search
                name, arguments = _extract(block)
                out.calls.append(ParsedCall(name, arguments))
                continue
            if isinstance(call, dict) and "name" in call and "arguments" in call:
                out.calls.append(ParsedCall(str(call["name"]), json.dumps(call["arguments"], ensure_ascii=False)))
        return out

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for result in results:  # a function message holding what the tool returned: its image, or its text
            images = [image_part(img) for img in result.images]
            texts = [{"type": "text", "text": result.text}] if result.text else []
            messages.append({"role": "tool", "content": [*images, *texts] if images else result.text})
        return messages


QWEN_AGENT = QwenAgent()
