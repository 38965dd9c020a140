"""Mini-o3's `<grounding>{"bbox_2d": […], "source": "original_image"}</grounding>`, served by `zoom_in`.

Every block is a call; one that does not read gets Mini-o3's "ERROR occurs during grounding" text. Results go
back as one `user` message, text then images.
"""

from __future__ import annotations

import re

from toolserver.formats.base import CallFormat, Parsed, ParsedCall, read_json

_BLOCK = re.compile(r"<grounding>(.*?)</grounding>", re.DOTALL)


class MiniO3(CallFormat):
    name = "mini-o3"
    description = "Mini-o3: <grounding> JSON blocks run as zoom_in; results in a user message."

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        for match in _BLOCK.finditer(text):
            value, err = read_json(match.group(1).strip())
            if err is not None or not isinstance(value, dict) or "bbox_2d" not in value:
                info = err or 'expected {"bbox_2d": [x0, y0, x1, y1], "source": "original_image"}'
                out.errors.append(f"ERROR occurs during grounding. Error Information: {info}.\n")
                continue
            out.calls.append(ParsedCall("zoom_in", {"image": value.get("source", "original_image"),
                                                    "bbox_2d": value["bbox_2d"]}))
        return out


MINI_O3 = MiniO3()
