"""DeepEyes' turn (Visual-Agent/DeepEyes @ 6c5e796, `VisualToolBoxV5.execute` in
`verl/workers/agent/envs/visual_agent/vl_agent_v5.py`).

A non-empty last `<answer>` ends the episode before any call is read; so does a text without
`<tool_call>…</tool_call>`. The first three blocks are the turn's calls, each `json.loads`-ed and indexed as
`["name"]`, `["arguments"]`; the first block that fails ends the list with Python's words behind `Error: ` (a call
before it still runs first, and its own failure would be what the model sees, as in the reference's loop). One
failure voids the turn: the observation is then only its `Error: …` text; otherwise one user turn of
`<tool_response>\\n<image>\\n</tool_response>\\n` per image, then TURN_PROMPT_V5, appended in Qwen's chat markup,
each `<image>` written as the rollout writes it (Qwen-VL's vision tokens; `image_marker` keeps the tag).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolserver import jsonio
from toolserver.formats.base import (
    ANSWER_BLOCK,
    HERMES_BLOCK,
    IMAGE_TOKEN,
    QWEN_USER_TURN,
    VISION_TOKENS,
    CallFormat,
    Parsed,
    ParsedCall,
    TurnRule,
    raw_text_messages,
)
from toolserver.models import ToolResult

# PROMPT.TURN_PROMPT_V5, appended after a turn's tool responses. The reference builds the tool-call text too but
# does not put it in: this prompt has no placeholder (the one that had is commented out).
TURN_PROMPT = (
    "\nThink in the mind first, and then decide whether to call tools one or more times OR provide final answer. "
    "Format strictly as: <think>...</think> <tool_call>...</tool_call> <tool_call>...</tool_call> (if any tools "
    "needed) OR <answer>...</answer> (if no tools needed)."
)
TOOL_RESPONSE = "<tool_response>\n" + IMAGE_TOKEN + "\n</tool_response>\n"


class DeepEyes(CallFormat):
    name = "deepeyes"
    description = "DeepEyes VisualToolBoxV5: up to 3 Hermes calls a turn, one failure voids it; raw-text observation."
    # VisualToolBoxV5.max_action_per_turn: later calls of a turn are not read.
    turn = TurnRule(stop_at_failure=True, errors_last=True, max_calls=3)

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        answers = ANSWER_BLOCK.findall(text)
        blocks = [block.strip() for block in HERMES_BLOCK.findall(text)]
        if (answers and answers[-1]) or not blocks:
            out.done = True
            return out
        out.done = False
        for block in blocks[:self.turn.max_calls]:
            try:
                call = jsonio.loads(block)
                name, arguments = call["name"], call["arguments"]
            except Exception as exc:  # the reference's turn catches everything and shows its text
                out.errors.append(f"Error: {exc}")
                break
            if not isinstance(name, str):
                out.errors.append(f"Error: Unknown tool name: {name}")
                break
            out.calls.append(ParsedCall(name, arguments))
        return out

    def _text(self, results: Sequence[ToolResult]) -> str | None:
        if not results:
            return None
        if not results[-1].ok:  # one failure is all the turn shows
            return results[-1].text
        return TOOL_RESPONSE * sum(len(r.images) for r in results) + TURN_PROMPT

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        return raw_text_messages(self._text(results), results)

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        """Its rollout (`_preprocess_multi_modal_inputs` in `verl/workers/agent/parallel_env.py`) replaces every
        `<image>` of the appended text with Qwen-VL's vision tokens."""
        text = self._text(results)
        return "" if text is None else (QWEN_USER_TURN[0] + text + QWEN_USER_TURN[1]).replace(IMAGE_TOKEN, image)


DEEPEYES = DeepEyes()
