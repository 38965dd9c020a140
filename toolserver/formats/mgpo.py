"""MGPO's grounding: the first fenced ```json block holding a list of objects with `bbox_2d` and `label`.

The block counts only if it is a non-empty list of objects, all of them (MGPO's `truncate_at_json_bbox`: one
element of another type rejects the whole block, and the next block is tried); its first item with an integer
`bbox_2d` of 4 and a string `label` is the call. No such block is itself an outcome: the grounding tool then
returns the original image with MGPO's message. Results go back as one `user` message, text then images.
"""

from __future__ import annotations

import re

from toolserver.formats.base import CallFormat, Parsed, ParsedCall, read_json

_BLOCK = re.compile(r"```json\n([\s\S]*?)\n```")


class Mgpo(CallFormat):
    name = "mgpo"
    description = "MGPO: a fenced ```json list with bbox_2d and label; results in a user message."

    def parse(self, text: str) -> Parsed:
        out = Parsed(self.name)
        for match in _BLOCK.finditer(text):
            value, err = read_json(match.group(1).strip())
            if err is not None or not isinstance(value, list) or not value:
                continue
            if not all(isinstance(item, dict) for item in value):
                continue
            for item in value:
                bbox = item.get("bbox_2d")
                if (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, int) for v in bbox)
                        and isinstance(item.get("label"), str)):
                    out.calls.append(ParsedCall("grounding", {"bbox_2d": bbox, "label": item["label"]}))
                    return out
        out.calls.append(ParsedCall("grounding", {"bbox_2d": None, "label": None}))
        return out


MGPO = Mgpo()
