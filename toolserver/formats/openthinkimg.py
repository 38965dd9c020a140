"""OpenThinkIMG's action JSON (zhaochen0110/OpenThinkIMG @ 45d295f0, `r1_v/open_r1/trainer/tool_generation.py`), read
as its GRPO rollout (`vllm_generate_with_tool_calls`, general mode) reads a model turn:

- a turn that holds `Terminate` anywhere ends the episode (checked before anything is parsed);
- otherwise the list after the first `"actions":` (brackets nested at most four deep, as its pattern allows) is read
  as JSON (`parse_tool_config`); when that fails, the list is empty, or any action lacks `name` or `arguments` (or
  has arguments that are not an object but name an image), the turn holds no call: the rollout repeats the task's
  question as an assistant message, which is the trainer's to write (no observation here; the episode goes on);
- only the first action runs, under its name as written (the `openthinkimg` profile looks names up as the rollout
  does, lower-cased among its six workers), with its `arguments` as they are; an `image` entry names an image
  (`img_1`, ...) but the rollout always hands the tool the newest image.

The observation is one user message (`append_conversation_fn`): the image, then the text. The text is the rollout's
(`handle_tool_result`): the worker's text in its `OBSERVATION:` lines under the name as written, or the task's
question where the worker answered an image field without an image (the tool says which, `meta["rollout"]`,
`toolserver/tools/perception/worker.py`). Chat messages for vLLM's `chat`, so no raw-text prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from toolserver.formats.base import CallFormat, Parsed, ParsedCall, TurnRule
from toolserver.messages import image_part
from toolserver.models import ToolResult

# The rollout's `tool_name_mapping`: the lower-cased name a model writes -> the tool server's worker name.
TOOL_NAMES = {name.lower(): name for name in ("DrawHorizontalLineByY", "ZoomInSubfigure", "DrawVerticalLineByX",
                                              "SegmentRegionAroundPoint", "Point", "OCR")}
TERMINATE = "Terminate"
SUMMARIZE = "Please summarize the model outputs and answer my first question."


def _bracketed(depth: int) -> str:
    """A bracketed list whose brackets nest at most `depth` deep (strings are not told apart, as in the rollout)."""
    inner = r"\[[^\[\]]*\]" if depth == 1 else _bracketed(depth - 1)
    return rf"\[(?:[^\[\]]|{inner})*\]" if depth > 1 else inner


ACTIONS = re.compile(r'"actions"\s*:\s*(' + _bracketed(4) + ")")


def read_actions(text: str) -> list[Any] | None:
    """The rollout's `extract_actions`: the first `"actions": [...]` list, parsed; None when none parses."""
    match = ACTIONS.search(text)
    if match is None:
        return None
    try:
        actions = json.loads(match.group(1))
    except ValueError:
        return None
    return actions if isinstance(actions, list) else None


def first_action(text: str) -> tuple[Any, Any] | None:
    """(name, arguments) of the first action, or None where `parse_tool_config` finds no tool call."""
    actions = read_actions(text)
    if not actions:
        return None
    for action in actions:  # every action must read, or none is taken
        if not isinstance(action, dict):
            return None
        arguments = action.get("arguments", {})
        try:
            has_image = "image" in arguments
        except TypeError:
            return None
        if has_image and not isinstance(arguments, dict):
            return None  # the rollout's item assignment fails
        if "name" not in action or "arguments" not in action:
            return None
    return actions[0]["name"], actions[0]["arguments"]


def written_name(name: Any) -> str:
    """The name a call runs under: as written (a name that is not a string, which stops the rollout, as JSON)."""
    return name if isinstance(name, str) else json.dumps(name)


def observation(name: str, text: str) -> str:
    """The rollout's text after a call its worker or tool manager answered (`handle_tool_result`)."""
    return f"OBSERVATION:\n{name} model outputs: {text}\n{SUMMARIZE}"


def rollout_text(result: ToolResult) -> str:
    """What the rollout writes back for one result (module docstring)."""
    kind = result.meta.get("rollout", "observation")
    if kind == "question":
        return str(result.meta["question"])
    if kind == "error":  # ours: the session lacks what the rollout would write
        return result.text
    return observation(result.tool, result.text)


class OpenThinkImgFormat(CallFormat):
    name = "openthinkimg"
    description = ("OpenThinkIMG: the first action of the {\"actions\": [{\"name\", \"arguments\"}]} JSON in the "
                   "turn; Terminate ends the episode; one user message back, the image then the text.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        if TERMINATE in text:
            return Parsed(self.name, done=True)
        found = first_action(text)
        out = Parsed(self.name, done=False)
        if found is not None:
            name, arguments = found
            out.calls.append(ParsedCall(written_name(name), arguments if isinstance(arguments, dict) else {}))
        return out

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        if not results:
            return []
        last = results[-1]
        content = [*(image_part(img) for img in last.images), {"type": "text", "text": rollout_text(last)}]
        return [{"role": "user", "content": content}]


OPENTHINKIMG = OpenThinkImgFormat()
