"""JSON in and out of the service: bounded nesting on the way in, orjson on the way out.

In: every JSON the service parses (request bodies, multipart `settings`, OpenAI argument strings, tool
calls found in model output) goes through `loads`, which is `json.loads` (the seed systems' parser, so
numbers and texts parse exactly as theirs do) plus a nesting limit. Python's parser raises RecursionError
on a body nested ~1,000 deep, and a structure just under that still breaks later code that recurses over
it (repr, validation, serialisation); so anything deeper than `MAX_DEPTH` is refused as malformed JSON.
No request of this API nests deeper than about six levels.

Out: responses are serialised with orjson from the model's plain-Python dump. For an inline 1 MP result
(a 1.2 MB base64 string) that is ~7× faster than pydantic's own JSON writer (BENCHMARKS.md).
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from pydantic import BaseModel

MAX_DEPTH = 64


def loads(raw: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads`, refusing documents nested deeper than `max_depth` (json.JSONDecodeError either way)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
    try:
        value = json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text[:64], 0) from None
    if isinstance(value, dict | list) and too_deep(value, max_depth):
        raise json.JSONDecodeError(f"nested deeper than {max_depth} levels", text[:64], 0)
    return value


def too_deep(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether containers nest deeper than `max_depth` (iterative: the walk itself must not recurse)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def dump_model(model: BaseModel) -> bytes:
    """The model as JSON bytes, as `model_dump_json` writes it, but faster for large strings."""
    try:
        return orjson.dumps(model.model_dump(mode="json"))
    except (TypeError, orjson.JSONEncodeError):  # e.g. non-string keys in a tool's meta: pydantic's writer
        return model.model_dump_json().encode()
