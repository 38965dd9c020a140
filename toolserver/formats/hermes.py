"""Hermes `<tool_call>{"name": …, "arguments": {…}}</tool_call>` blocks (ARM-Thinker, IMAgent, the default profile).

Every block is a call; one that is not JSON, or not an object with a `name`, gets its own error instead of being
dropped (verl's Hermes parser only logs bad calls). Results go back as one `tool` message per call, images first
then text, the order the seed systems' chat templates use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolserver.formats.base import HERMES_BLOCK, CallFormat, Parsed, ParsedCall, read_json
from toolserver.messages import image_part
from toolserver.models import ToolResult


class Hermes(CallFormat):
    name = "hermes"
    description = "Hermes <tool_call> JSON blocks; a tool message per call, images first then text."

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        for i, match in enumerate(HERMES_BLOCK.finditer(text), start=1):
            value, err = read_json(match.group(1).strip())
            if err is not None:
                out.errors.append(f"Error: tool call {i} is not valid JSON ({err}). Write "
                                  '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.')
                continue
            if not isinstance(value, dict) or not isinstance(value.get("name"), str):
                out.errors.append(f'Error: tool call {i} must be a JSON object with a "name" and "arguments".')
                continue
            arguments = value.get("arguments", {})
            if isinstance(arguments, str):  # some models double-encode the arguments
                arguments, err = read_json(arguments) if arguments.strip() else ({}, None)
            if err is not None or not isinstance(arguments, dict):
                out.errors.append(f'Error: the "arguments" of tool call {i} ({value["name"]}) must be a JSON object.')
                continue
            out.calls.append(ParsedCall(value["name"], arguments))
        if text.count("<tool_call>") > text.count("</tool_call>"):
            out.errors.append("Error: a <tool_call> is not closed with </tool_call>.")
        return out

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for result in results:
            images = [image_part(img) for img in result.images]
            content: Any = [*images, {"type": "text", "text": result.text}] if images else result.text
            messages.append({"role": "tool", "content": content})
        return messages


HERMES = Hermes()
