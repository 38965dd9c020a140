"""VRAG-RL's tagged actions (Alibaba-NLP/VRAG @ 24f8d055, `VRAG-RL/vrag_agent/generation.py`), read as its rollout
reads a turn: `_postprocess_responses` keeps only the `<answer>`, `<search>`, `<think>` and `<bbox>` blocks (joined by
newlines), then `postprocess_predictions` takes the first `<search>`, `<answer>` or `<bbox>` block of that, stripped.
`<answer>` ends the episode; `<search>q</search>` is a call of `search` with the query, `<bbox>…</bbox>` one of `bbox`
with the box as written (the tool reads it as the rollout does); a turn with none of them gets the rollout's fixed
invalid-action text and goes on.

The observation is the raw text the rollout appends to the token stream: `\\n<|im_start|>user\\n` + the image (Qwen-VL's
vision tokens, or `<image>` when the session asks) + `<|im_end|>\\n<|im_start|>assistant\\n`; a refused action appends
its invalid-action text in the same markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from toolserver.formats.base import IMAGE_TOKEN, VISION_TOKENS, Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.models import ToolResult

USER, ASSISTANT = "\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
KEPT_TAGS = re.compile(r"<(answer|search|think|bbox)>(.*?)</\1>", re.DOTALL)
ACTION = re.compile(r"<(search|answer|bbox)>(.*?)</\1>", re.DOTALL)
# The rollout's two invalid-action texts (between its user-turn markup): a bad <bbox> or a crop that fails, and a
# turn with no action at all.
INVALID_BBOX = (
    "Your previous action is invalid. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> "
    "query </search> and user will return the searched results. Every time you retrieve an image, you have the option "
    "to crop it to obtain a clearer view, the format for coordinates is <bbox>[x1, y1, x2, y2]</bbox>. You can search "
    "as many times as your want. If you find no further external knowledge needed, you can directly provide the "
    "answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Please try again.\n")
INVALID_ACTION = (
    "Your previous action is invalid. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you want to search, you should put the query between <search> and "
    "</search>.\nIf you find no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Please try again.\n")


def extract_tags(text: str) -> str:
    """`_postprocess_responses`: the kept blocks, in order, joined by newlines (before its EOS token)."""
    return "\n".join(f"<{tag}>{content}</{tag}>" for tag, content in KEPT_TAGS.findall(text))


def action_of(text: str) -> tuple[str | None, str]:
    """`postprocess_predictions` of the kept blocks: (action, content stripped), or (None, "")."""
    match = ACTION.search(extract_tags(text))
    return (match.group(1), match.group(2).strip()) if match else (None, "")


class VragFormat(RawTextFormat):
    name = "vrag"
    description = ("VRAG-RL: the first <search>, <answer> or <bbox> block of a turn (after its tag filter); "
                   "raw-text observation in Qwen's user-turn markup, one page image or crop a turn.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        action, content = action_of(text)
        if action == "answer":
            return Parsed(self.name, done=True)
        out = Parsed(self.name, done=False)
        if action is None:
            out.notices.append(INVALID_ACTION)
        else:
            out.calls.append(ParsedCall(action, {"query" if action == "search" else "bbox": content}))
        return out

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        body = self.last_text(results)
        return "" if body is None else USER + body.replace(IMAGE_TOKEN, image) + ASSISTANT


VRAG = VragFormat()
