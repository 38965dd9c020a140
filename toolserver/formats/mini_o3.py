"""Mini-o3's turn (Mini-o3/Mini-o3 @ 8654dbf4, `AsyncvLLMEngine._async_rollout_a_request` in
`verl/workers/rollout/vllm_rollout/vllm_async_engine.py`): generation stops at `</grounding>`; a text with a
`<grounding>…</grounding>` block is an action, one without ends the episode.

The action is the whole turn, as the rollout hands its decoded response to `process_tool_call`: one call to the
profile's `grounding` tool with the turn as its `turn` argument, which reads the block with the rollout's own
pattern (`toolserver.profiles.mini_o3`). Every action is such a call, a malformed one too, so the session's call
count is the rollout's turn counter (`Action k`, `Observation k+1`). The observation is the user turn it appends:
after `<|im_end|>\\n<|im_start|>user\\n` (the stop string is not followed by the end of the assistant turn), the
tool's text, then `<|im_end|>\\n<|im_start|>assistant\\n`; the image where the text has it, written as the rollout
writes it (Qwen-VL's vision tokens) unless the session asks for `<image>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from toolserver.formats.base import (
    IMAGE_TOKEN,
    QWEN_USER_TURN,
    VISION_TOKENS,
    Parsed,
    ParsedCall,
    RawTextFormat,
    TurnRule,
)
from toolserver.models import ToolResult

GROUNDING = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)  # the rollout's test for an action
TOOL = "grounding"


class MiniO3(RawTextFormat):
    name = "mini-o3"
    description = ("Mini-o3: a turn with <grounding> is one call of its grounding tool (the whole turn, read with its "
                   "pattern); raw-text observation in Qwen2.5-VL's markup with its observation counter.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        if not GROUNDING.findall(text):
            return Parsed(self.name, done=True)
        return Parsed(self.name, calls=[ParsedCall(TOOL, {"turn": text})], done=False)

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        """Appended right after `</grounding>`. Only the turn's own template holds an image: an error text, which
        may quote what the model wrote, is appended as it is."""
        if not results:
            return ""
        result = results[-1]
        text = result.text.replace(IMAGE_TOKEN, image) if result.ok else result.text
        return QWEN_USER_TURN[0] + text + QWEN_USER_TURN[1]


MINI_O3 = MiniO3()
