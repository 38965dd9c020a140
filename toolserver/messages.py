"""Tool results rendered as OpenAI chat messages (`/tool_calls`); the call formats of `/act` render their own
observations (`toolserver.formats`) with the image parts made here.

`image_message="tool"`: each `role:"tool"` message carries its images as `image_url` parts, images
first then text, the order the seed systems' chat templates (ARM-Thinker, verl) use.
`image_message="user"`: OpenAI's own schema allows only text in tool messages, so tool messages are
text-only and one `role:"user"` message follows with every image, each introduced by a text part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pybase64

from toolserver.models import ResultImage, ToolResult


def image_base64(image: ResultImage) -> str:
    """An inline image's base64 (its `data` is base64 already, or bytes from a binary call)."""
    if image.data is None:
        raise ValueError(f"image {image.key} was not delivered inline")
    return pybase64.b64encode_as_string(image.data) if isinstance(image.data, bytes) else image.data


def image_url(image: ResultImage) -> str:
    if image.data is not None:
        return f"data:{image.mime};base64,{image_base64(image)}"
    if image.url is not None:
        return image.url
    if image.path is not None:
        return "file://" + image.path
    raise ValueError(f"image {image.key} has no data, url or path")  # pragma: no cover


def image_part(image: ResultImage) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": image_url(image)}}


def tool_messages(call_ids: Sequence[str], results: Sequence[ToolResult],
                  image_message: str = "tool") -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    follow_up: list[dict[str, Any]] = []
    for call_id, result in zip(call_ids, results, strict=True):
        if image_message == "tool" and result.images:
            content: Any = [image_part(img) for img in result.images]
            content.append({"type": "text", "text": result.text})
        else:
            content = result.text
            for img in result.images:
                follow_up.append({"type": "text", "text": f"Image `{img.key}` from tool call {call_id}:"})
                follow_up.append(image_part(img))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    if follow_up:
        messages.append({"role": "user", "content": follow_up})
    return messages
