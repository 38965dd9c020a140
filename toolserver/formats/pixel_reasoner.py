"""Pixel-Reasoner's turn as verl-tool's tool server reads it (TIGER-AI-Lab/verl-tool @ 980962b,
`PixelReasonerTool.parse_action` in `verl_tool/servers/tools/pixel_reasoner.py`).

The first `<tool_call>` block only, `json.loads`-ed; one that does not parse, is not an object or names no known
action is no action: the observation is empty (''). Then `arguments` must be there and be an object, with the
reference's texts. The agent loop calls the tool server only when the model stopped at `</tool_call>`, so a text
without `<tool_call>` ends the episode. The observation is the tool server's text for the one call, `<image>`
marking its image (in `prompt`, written as the agent loop replaces it); verl-tool's agent loop wraps it in the
chat template it is set up with.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolserver import jsonio
from toolserver.formats.base import IMAGE_TOKEN, VISION_TOKENS, Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.models import ToolResult

# PixelReasonerTool.valid_mcp_func_names: any other name is not an action at all.
ACTIONS = ("zoom_in", "crop_image_normalized", "select_frames", "crop_image")


class PixelReasoner(RawTextFormat):
    name = "pixel-reasoner"
    description = "Pixel-Reasoner (verl-tool): the first <tool_call> only; raw-text observation with <image>."
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        if "<tool_call>" not in text:
            out.done = True
            return out
        out.done = False
        try:
            call = jsonio.loads(text.split("<tool_call>")[1].split("</tool_call>")[0])
            name = call.get("name", "")
            known = name in ACTIONS
        except Exception:
            known = False
        if not known:
            out.errors.append("")
        elif "arguments" not in call:
            out.errors.append("Missing 'arguments' in the tool call.")
        elif not isinstance(call["arguments"], dict):
            out.errors.append("'arguments' should be a dictionary of parameters key-value pairs, got "
                              f"{type(call['arguments'])}.")
        else:
            out.calls.append(ParsedCall(name, call["arguments"]))
        return out

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        """The tool server's text with each `<image>` as verl-tool's agent loop replaces it (Qwen-VL's vision
        tokens, `verltool_agent_loop.py`); a session with `image_marker: "image_tag"` gets the server's own text."""
        text = self.last_text(results)
        return "" if text is None else text.replace(IMAGE_TOKEN, image)


PIXEL_REASONER = PixelReasoner()
