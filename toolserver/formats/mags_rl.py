"""Mags-RL's magnifying glass: `<zoom>[[x1, y1, x2, y2], …]</zoom>` inside the thinking (paper's format).

The first `<zoom>` block is one call with all its boxes; a text with neither a zoom nor an answer, or boxes that do
not read as a list of lists, get a "Zoom failed: …" text. Results go back as one `user` message, text then images.
"""

from __future__ import annotations

import re

from toolserver.formats.base import CallFormat, Parsed, ParsedCall, read_json

_BLOCK = re.compile(r"<zoom>(.*?)</zoom>", re.DOTALL)


class MagsRl(CallFormat):
    name = "mags-rl"
    description = "Mags-RL: <zoom>[[x1, y1, x2, y2], ...]</zoom>; results in a user message."

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        match = _BLOCK.search(text)
        if match is None:
            if "<answer>" not in text:
                out.errors.append("Zoom failed: no <zoom>[[x1, y1, x2, y2], ...]</zoom> found inside <think>.")
            return out
        value, err = read_json(match.group(1).strip())
        if err is not None or not isinstance(value, list) or not value or not all(isinstance(b, list) for b in value):
            reason = err or "expected a list of boxes"
            out.errors.append(f"Zoom failed: cannot read the boxes ({reason}). "
                              "Use double brackets: <zoom>[[x1, y1, x2, y2], ...]</zoom>.")
            return out
        out.calls.append(ParsedCall("zoom", {"boxes": value}))
        return out


MAGS_RL = MagsRl()
