"""Request bodies the clients send: images, videos and texts as multipart or JSON, session settings, tool
calls, validation items; the connection settings and the session handle both clients' sessions share."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
import msgpack
import pybase64
from pydantic import BaseModel, TypeAdapter
from tenacity import retry_if_exception, stop_after_attempt

from toolserver.client.errors import (
    _Retryable,
    _Wait,
)
from toolserver.models import (
    ImageInfo,
    ImageInput,
    OutputSettings,
    SessionCreated,
    SessionInfo,
    ToolResult,
    ValidateItem,
    ViewSettings,
)

DEFAULT_URL = "http://127.0.0.1:8000"
ImageLike = Any  # PIL.Image.Image | str | os.PathLike | bytes | ImageInput | Mapping
ImageMessage = Literal["tool", "user"]
_TOOL_CALLS = TypeAdapter(list[dict[str, Any]])


def _encode_pil(image: Any) -> bytes:
    """A PIL image goes up losslessly, with the fast PNG writer (the upload is decoded once, server-side)."""
    from toolserver.imaging import encode_png  # Pillow and fpng only when the caller passes PIL images

    return encode_png(image)


def _raw_bytes(image: ImageLike) -> bytes | None:
    """Bytes to upload for a local image, or None for something the server fetches or decodes itself."""
    if isinstance(image, bytes | bytearray | memoryview):
        return bytes(image)
    if isinstance(image, os.PathLike) or (isinstance(image, str) and not image.startswith(
            ("data:", "http://", "https://"))):
        return Path(image).read_bytes()
    if hasattr(image, "save") and hasattr(image, "size"):  # a PIL image
        return _encode_pil(image)
    return None


def _video_body(video: bytes | str | os.PathLike, key: str | None, frames_per_second: float | None,
                max_frames: int | None) -> dict[str, Any]:
    data = video if isinstance(video, bytes) else Path(video).read_bytes()
    item = ImageInput(data=pybase64.b64encode_as_string(data), key=key, frames_per_second=frames_per_second,
                      max_frames=max_frames)
    return {"images": [item.model_dump(exclude_none=True)]}


def _image_input(image: ImageLike, key: str | None = None) -> ImageInput:
    if isinstance(image, ImageInput):
        return image.model_copy(update={"key": key}) if key else image
    if isinstance(image, Mapping):
        return ImageInput.model_validate({**image, **({"key": key} if key else {})})
    if isinstance(image, str) and image.startswith("data:"):
        return ImageInput(data=image, key=key)
    if isinstance(image, str):
        return ImageInput(url=image, key=key)
    raw = _raw_bytes(image)
    if raw is None:
        raise TypeError(f"not an image: {type(image).__name__}")
    return ImageInput(data=pybase64.b64encode_as_string(raw), key=key)


def _image_payload(images: Sequence[ImageLike] | Mapping[str, ImageLike],
                   settings: dict[str, Any] | None) -> dict[str, Any]:
    """httpx keyword arguments: multipart when every image is local and unnamed, JSON otherwise."""
    if not isinstance(images, Mapping):
        raws = [_raw_bytes(image) if not isinstance(image, ImageInput | Mapping) else None for image in images]
        if all(raw is not None for raw in raws):
            if not raws:  # nothing to upload: the settings alone (create) or an empty list (add)
                return {"json": settings if settings is not None else {"images": []}}
            files = [("files", (f"image_{i}", raw, "application/octet-stream")) for i, raw in enumerate(raws)]
            return {"files": files, "data": {"settings": json.dumps(settings)} if settings is not None else None}
        inputs = [_image_input(image) for image in images]
    else:
        inputs = [_image_input(image, key) for key, image in images.items()]
    body = dict(settings or {})
    body["images"] = [i.model_dump(exclude_none=True) for i in inputs]
    return {"json": body}


def _session_settings(profile: str, coords: str | None, view: ViewSettings | Mapping | None,
                      output: OutputSettings | Mapping | None, ttl_s: float | None,
                      max_tool_calls: int | None, texts: Mapping[str, str] | Sequence[str] | None,
                      input_form: str | None = None, image_marker: str | None = None) -> dict[str, Any]:
    settings: dict[str, Any] = {"profile": profile}
    for name, scalar in (("coords", coords), ("ttl_s", ttl_s), ("max_tool_calls", max_tool_calls),
                         ("input_form", input_form), ("image_marker", image_marker)):
        if scalar is not None:
            settings[name] = scalar
    for name, nested in (("view", view), ("output", output)):
        if nested is not None:
            settings[name] = nested.model_dump() if isinstance(nested, BaseModel) else dict(nested)
    if texts:
        settings["texts"] = dict(texts) if isinstance(texts, Mapping) else list(texts)
    return settings


def _tool_calls_body(tool_calls: Iterable[Any], image_message: ImageMessage) -> dict[str, Any]:
    """OpenAI tool calls as dicts or as the `openai` package's objects (anything with `model_dump`)."""
    calls = [call.model_dump() if hasattr(call, "model_dump") else call for call in tool_calls]
    return {"tool_calls": _TOOL_CALLS.validate_python(calls), "image_message": image_message}


def _validate_items(items: Iterable[ValidateItem | Mapping[str, Any]]) -> dict[str, Any]:
    return {"items": [i.model_dump() if isinstance(i, ValidateItem) else dict(i) for i in items]}


MSGPACK = "application/msgpack"


def _tool_result(response: httpx.Response) -> ToolResult:
    """A tool call's answer: msgpack (images as bytes) when the server sent it, JSON (base64) otherwise."""
    if response.headers.get("content-type", "").startswith(MSGPACK):
        return ToolResult.model_validate(msgpack.unpackb(response.content))
    return ToolResult.model_validate_json(response.content)


class _Config:
    def __init__(self, base_url: str, api_key: str | None, timeout: float, retries: int,
                 backoff: float, max_backoff: float, headers: Mapping[str, str] | None, binary: bool = True):
        self.base_url = base_url.rstrip("/")
        # Tool results as msgpack: inline images arrive as their bytes, with no base64 to parse and decode.
        self.result_headers = {"Accept": f"{MSGPACK}, application/json;q=0.5"} if binary else None
        self.headers = dict(headers or {})
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self.attempts = retries + 1
        self.wait = _Wait(backoff, max_backoff)

    def call_headers(self, idempotency_key: str | None, *, results: bool = True) -> dict[str, str]:
        """A tool call's headers: its idempotency key (a fresh one unless given; the retries of this call reuse
        it, so a call the server already ran is answered from its record, not run twice) and, for results, the
        binary answer."""
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        if results and self.result_headers:
            headers |= self.result_headers
        return headers

    def retrying_kwargs(self) -> dict[str, Any]:
        return {"stop": stop_after_attempt(self.attempts), "wait": self.wait, "reraise": True,
                "retry": retry_if_exception(lambda e: isinstance(e, _Retryable))}


SESSION_HEADER = "X-Session-ID"


def _with_session_header(path: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A request about one session names it in `X-Session-ID`, so that a router with session affinity (Ray Serve's
    consistent-hash router) can send its calls to one replica, whose caches are then warm. Only a hint: any
    replica answers any session."""
    parts = path.split("/", 4)
    if len(parts) >= 4 and parts[1] == "v1" and parts[2] == "sessions" and parts[3]:
        kwargs["headers"] = {SESSION_HEADER: parts[3], **(kwargs.get("headers") or {})}
    return kwargs


def _as_created(response: httpx.Response) -> SessionCreated:
    """A `GET /v1/sessions/{id}` answer in the shape a session handle is built from."""
    info = SessionInfo.model_validate_json(response.content)
    return SessionCreated(session_id=info.session_id, profile=info.settings.profile, images=info.images,
                          texts=[t.key for t in info.texts], expires_in_s=info.expires_in_s)


class _SessionHandle:
    """What both session handles hold: the client, the creation answer, and the session's URL paths."""

    def __init__(self, client: Any, created: SessionCreated):
        self._client = client
        self.created = created
        self.id = created.session_id
        self.profile = created.profile

    @property
    def images(self) -> list[ImageInfo]:
        """The session's images so far (inputs added through this handle included)."""
        return self.created.images

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sessions/{self.id}{suffix}"
