"""Groundlight r1_vlm's `<tool>` block of `key: value` lines (`name: zoom`, `keypoint: [x, y]`).

The first block is the call. The environment's own texts are kept: a text with neither a call nor an answer gets
its bare "No tool call or answer found" reply; argument problems read "Error: Parsing arguments for tool 'zoom':
…"; an unknown tool and other failures are reworded by the environment (`finish`). Results go back as a `user`
message: an image introduced by `<image_name> tool_result_N </image_name>`, a text wrapped in `<result>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from toolserver import jsonio
from toolserver.formats.base import NO_TOOL_CALL, CallFormat, Parsed, ParsedCall, read_json
from toolserver.messages import image_part
from toolserver.models import ErrorInfo, ToolResult

_BLOCK = re.compile(r"<tool>\s*(.*?)\s*</tool>", re.DOTALL)


def parse_key_values(blob: str) -> dict[str, str]:
    """Groundlight's key-value lines: `key: value`, split at the first ': ', later keys overwrite."""
    args: dict[str, str] = {}
    for line in blob.strip().split("\n"):
        line = line.strip()
        if not line or ": " not in line:
            continue
        key, value = line.split(": ", 1)
        args[key.strip()] = value.strip()
    return args


def _zoom_args_problem(raw: dict[str, str]) -> str | None:
    expected = {"name", "keypoint"}
    missing, extra = expected - set(raw), set(raw) - expected
    if missing:
        return f"Missing required arguments for zoom tool: {', '.join(sorted(missing))}"
    if extra:
        return f"Unexpected arguments for zoom tool: {', '.join(sorted(extra))}"
    value, err = read_json(raw["keypoint"])
    if err is not None:
        return f"Error: Invalid JSON format for 'keypoint': '{raw['keypoint']}'"
    if not isinstance(value, list) or len(value) != 2:
        return "Error: 'keypoint' must be a JSON list of two elements."
    if not all(isinstance(v, int) for v in value):
        return "Error: Both elements in 'keypoint' list must be integers."
    return None


class Groundlight(CallFormat):
    name = "groundlight"
    description = "Groundlight r1_vlm: a <tool> block of key: value lines; results in a user message."

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        match = _BLOCK.search(text)
        if match is None:
            if "<answer>" not in text:
                out.notices.append("Error: No tool call or answer found in your last message.")
            return out
        raw = parse_key_values(match.group(1))
        name = raw.get("name")
        if not name:
            out.errors.append("Error: Tool call must specify 'name' in key-value format.")
            return out
        if name != "zoom":
            out.calls.append(ParsedCall(name, {k: v for k, v in raw.items() if k != "name"}))
            return out
        problem = _zoom_args_problem(raw)
        if problem is not None:
            out.errors.append(f"Error: Parsing arguments for tool 'zoom': {problem}")
            return out
        out.calls.append(ParsedCall("zoom", {"keypoint": jsonio.loads(raw["keypoint"])}))
        return out

    def finish(self, results: list[ToolResult]) -> list[ToolResult]:
        return [_environment_words(result) for result in results]

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        for result in results:
            images = [image_part(img) for img in result.images]
            if result.ok and images:
                messages.append({"role": "user", "content": [{"type": "text", "text": result.text}, *images]})
            elif result.error is not None and result.error.code == NO_TOOL_CALL:  # the env's own reply, bare
                messages.append({"role": "user", "content": result.text})
            else:
                messages.append({"role": "user", "content": f"<result>\n{result.text}\n</result>"})
        return messages


def _environment_words(result: ToolResult) -> ToolResult:
    """Groundlight's environment names unknown tools and wraps other failures in its own words."""
    if result.ok or result.error is None or result.tool == "parser":
        return result
    if result.text.startswith("Error: Parsing arguments"):
        return result
    if result.error.code == "unknown_tool":
        text = f"Error: Unknown tool '{result.tool}' specified. Valid tools are: zoom"
    else:
        text = f"Error: During execution of tool '{result.tool}': {result.text}"
    return result.model_copy(update={"text": text, "error": ErrorInfo(code=result.error.code, message=text)})


GROUNDLIGHT = Groundlight()
