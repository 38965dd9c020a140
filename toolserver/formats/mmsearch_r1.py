"""MMSearch-R1's search triggers (EvolvingLMMs-Lab/multimodal-search-r1 @ 583c6b49,
`mmsearch_r1/workers/multimodal/rollout/vllm_rollout_spmd.py`), read as its multi-turn rollout reads a response.

The rollout decodes the response without special tokens, then: a response ending in `<search><img></search>` asks
for an image search of the row's image (`image_search`, no arguments); else one ending in a one-line
`<text_search>…</text_search>` asks for a text search of the last `<text_search>…</text_search>` of the response
(`text_search` with that query, as written); one whose query is empty leaves the rollout, as does every other
response (the episode is over). Both patterns are anchored at the end (Python's `$`: a final newline may follow) and
neither crosses a line.

The observation is the raw text the rollout appends to the token stream after the response (which ends in
`<|im_end|>`): `<|im_start|>user\\n` + the search message + `<|im_end|>\\n<|im_start|>assistant\\n`, each thumbnail
written as Qwen-VL's vision tokens (or `<image>` when the session asks). A search past the rollout's limits ends the
episode with nothing appended, as the rollout drops the trajectory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from toolserver.formats.base import IMAGE_TOKEN, VISION_TOKENS, Parsed, ParsedCall, RawTextFormat, TurnRule
from toolserver.models import ToolResult

USER, ASSISTANT = "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"
IMAGE_SEARCH = re.compile(r"<search><img></search>$")
TEXT_SEARCH = re.compile(r"<text_search>.*</text_search>$")
TEXT_QUERY = re.compile(r"<text_search>(.*?)</text_search>")
SEARCH_LIMIT = "search_limit"  # error code of a search the rollout's limits refuse: the episode ends
# Qwen2.5-VL's special tokens, which `decode(..., skip_special_tokens=True)` leaves out.
SPECIAL_TOKENS = re.compile(
    r"<\|(?:endoftext|im_start|im_end|object_ref_start|object_ref_end|box_start|box_end|quad_start|quad_end|"
    r"vision_start|vision_end|vision_pad|image_pad|video_pad)\|>")


def decoded(text: str) -> str:
    """The response as the rollout decodes it: the special tokens left out."""
    return SPECIAL_TOKENS.sub("", text)


def search_of(text: str) -> tuple[str, str | None] | None:
    """('image', None), ('text', query), ('text', None) for a text search with an empty query, or None."""
    response = decoded(text)
    if IMAGE_SEARCH.search(response):
        return "image", None
    if TEXT_SEARCH.search(response):
        query = None
        for match in TEXT_QUERY.finditer(response):
            query = match.group(1)
        return "text", query or None
    return None


def limited(results: Sequence[ToolResult]) -> bool:
    """A search the rollout's limits refused (the episode ends there)."""
    return any(r.error is not None and r.error.code == SEARCH_LIMIT for r in results)


class MMSearchR1Format(RawTextFormat):
    name = "mmsearch-r1"
    description = ("MMSearch-R1: a response ending in <search><img></search> runs an image search, one ending in "
                   "<text_search>q</text_search> a text search of its last query; anything else ends the episode. "
                   "Raw-text observation in Qwen's user-turn markup, thumbnails and titles interleaved.")
    turn = TurnRule(max_calls=1)

    def parse(self, text: str) -> Parsed:
        found = search_of(text)
        if found is None or (found[0] == "text" and found[1] is None):
            return Parsed(self.name, done=True)
        kind, query = found
        call = ParsedCall("image_search", {}) if kind == "image" else ParsedCall("text_search", {"query": query})
        return Parsed(self.name, calls=[call], done=False)

    def ends(self, parsed: Parsed, results: Sequence[ToolResult]) -> bool:
        return limited(results) or super().ends(parsed, results)

    def observation(self, results: Sequence[ToolResult]) -> list[dict[str, Any]]:
        return [] if limited(results) else super().observation(results)

    def prompt(self, results: Sequence[ToolResult], image: str = VISION_TOKENS) -> str | None:
        if limited(results):
            return ""
        body = self.last_text(results)
        return "" if body is None else USER + body.replace(IMAGE_TOKEN, image) + ASSISTANT


MMSEARCH_R1 = MMSearchR1Format()
