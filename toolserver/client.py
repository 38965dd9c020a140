"""Python clients for a toolserver: `Client` (sync) and `AsyncClient`, both on httpx.

    from toolserver.client import Client

    with Client("http://127.0.0.1:8000") as ts, ts.create_session([image]) as session:
        result = session.call("zoom_in", image_key="img_0", bbox=[100, 100, 500, 400])
        messages = session.run_tool_calls(completion.choices[0].message.tool_calls).messages

Images go up once per session (PIL images, local paths and bytes as multipart files; `ImageInput` for a
server path, a URL or a data URI) and are then named by key. Tool failures are results (`ok=False`, text for
the model); protocol failures raise `ToolServerError` subclasses. 429 and 503 answers are retried with
exponential backoff that honours `Retry-After`; so are connections that never reached the server. A read
timeout is not retried (the call may have run) and raises `ToolServerTimeout`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import httpx
import pybase64
from pydantic import BaseModel, TypeAdapter
from tenacity import AsyncRetrying, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from toolserver.models import (
    ActResponse,
    AddedImages,
    AddedTexts,
    ImageInfo,
    ImageInput,
    OutputSettings,
    SessionCreated,
    SessionInfo,
    ToolCallsResponse,
    ToolResult,
    ValidateItem,
    ValidateResponse,
    ValidateResult,
    ViewSettings,
)

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "Client",
    "ImageInput",
    "Session",
    "SessionNotFound",
    "ToolServerError",
    "ToolServerOverloaded",
    "ToolServerTimeout",
    "ToolServerUnavailable",
]

DEFAULT_URL = "http://127.0.0.1:8000"
ImageLike = Any  # PIL.Image.Image | str | os.PathLike | bytes | ImageInput | Mapping
ImageMessage = Literal["tool", "user"]
_TOOL_CALLS = TypeAdapter(list[dict[str, Any]])


# -- errors --------------------------------------------------------------------------------------
class ToolServerError(Exception):
    """A protocol-level failure: the HTTP status, the server's error code and its message."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message if status is None else f"{status} {code}: {message}")
        self.message, self.status, self.code = message, status, code


class SessionNotFound(ToolServerError):
    """404 (never existed, or released) or 410 (expired or evicted): create a new session."""


class ToolServerOverloaded(ToolServerError):
    """429 after every retry: the server's queue stayed full."""


class ToolServerUnavailable(ToolServerError):
    """503 after every retry (shutting down, or a required component missing), or no connection at all."""


class ToolServerTimeout(ToolServerError):
    """No answer within the timeout. Not retried: the call may have run on the server."""


class _Retryable(Exception):
    def __init__(self, error: ToolServerError, retry_after: float | None):
        super().__init__(str(error))
        self.error, self.retry_after = error, retry_after


def _error_from(response: httpx.Response) -> ToolServerError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail", response.text) if isinstance(body, dict) else response.text
    if isinstance(detail, list):  # FastAPI's own validation errors
        detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    code = body.get("code") if isinstance(body, dict) else None
    status = response.status_code
    kind = {404: SessionNotFound, 410: SessionNotFound, 429: ToolServerOverloaded,
            503: ToolServerUnavailable}.get(status, ToolServerError)
    return kind(str(detail), status=status, code=code or "http_error")


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


class _Wait:
    """Exponential backoff with jitter, or the server's `Retry-After` when it gives one (capped)."""

    def __init__(self, backoff: float, max_backoff: float):
        self.exponential = wait_exponential_jitter(multiplier=backoff, max=max_backoff, jitter=backoff)
        self.max_backoff = max_backoff

    def __call__(self, state) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_backoff)
        return self.exponential(state)


# -- request building shared by both clients -----------------------------------------------------
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
                      max_tool_calls: int | None, texts: Mapping[str, str] | Sequence[str] | None) -> dict[str, Any]:
    settings: dict[str, Any] = {"profile": profile}
    for name, value in (("coords", coords), ("ttl_s", ttl_s), ("max_tool_calls", max_tool_calls)):
        if value is not None:
            settings[name] = value
    for name, value in (("view", view), ("output", output)):
        if value is not None:
            settings[name] = value.model_dump() if isinstance(value, BaseModel) else dict(value)
    if texts:
        settings["texts"] = dict(texts) if isinstance(texts, Mapping) else list(texts)
    return settings


def _tool_calls_body(tool_calls: Iterable[Any], image_message: ImageMessage) -> dict[str, Any]:
    """OpenAI tool calls as dicts or as the `openai` package's objects (anything with `model_dump`)."""
    calls = [call.model_dump() if hasattr(call, "model_dump") else call for call in tool_calls]
    return {"tool_calls": _TOOL_CALLS.validate_python(calls), "image_message": image_message}


def _validate_items(items: Iterable[ValidateItem | Mapping[str, Any]]) -> dict[str, Any]:
    return {"items": [i.model_dump() if isinstance(i, ValidateItem) else dict(i) for i in items]}


class _Config:
    def __init__(self, base_url: str, api_key: str | None, timeout: float, retries: int,
                 backoff: float, max_backoff: float, headers: Mapping[str, str] | None):
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self.attempts = retries + 1
        self.wait = _Wait(backoff, max_backoff)

    def retrying_kwargs(self) -> dict[str, Any]:
        return {"stop": stop_after_attempt(self.attempts), "wait": self.wait, "reraise": True,
                "retry": retry_if_exception(lambda e: isinstance(e, _Retryable))}


def _as_created(response: httpx.Response) -> SessionCreated:
    """A `GET /v1/sessions/{id}` answer in the shape a session handle is built from."""
    info = SessionInfo.model_validate_json(response.content)
    return SessionCreated(session_id=info.session_id, profile=info.settings.profile, images=info.images,
                          texts=[t.key for t in info.texts], expires_in_s=info.expires_in_s)


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code in (429, 503):
        raise _Retryable(_error_from(response), _retry_after(response))
    if response.is_error:
        raise _error_from(response)
    return response


def _transport_error(exc: httpx.TransportError, url: str) -> ToolServerError | _Retryable:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        # The request never reached the server: safe to retry.
        return _Retryable(ToolServerUnavailable(f"cannot connect to {url}: {exc}"), None)
    if isinstance(exc, httpx.TimeoutException):
        return ToolServerTimeout(f"no answer from {url} in time ({type(exc).__name__})")
    return ToolServerError(f"{type(exc).__name__} talking to {url}: {exc}")


# -- sync ----------------------------------------------------------------------------------------
class Client:
    """A toolserver over HTTP. Thread-safe; reuse one per process (it pools connections)."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 headers: Mapping[str, str] | None = None, limits: httpx.Limits | None = None,
                 transport: httpx.BaseTransport | None = None):
        self._config = _Config(base_url, api_key, timeout, retries, backoff, max_backoff, headers)
        self._http = httpx.Client(base_url=self._config.base_url, headers=self._config.headers,
                                  timeout=self._config.timeout, transport=transport,
                                  limits=limits or httpx.Limits(max_connections=100, max_keepalive_connections=20))

    def request(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        """One HTTP request with the client's retry policy; raises `ToolServerError` on failure."""
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            for attempt in Retrying(**self._config.retrying_kwargs()):
                with attempt:
                    try:
                        return _check(self._http.request(method, path, **kwargs))
                    except httpx.TransportError as exc:
                        raise _transport_error(exc, self._config.base_url + path) from exc
        except _Retryable as exc:
            raise exc.error from None
        raise AssertionError("unreachable")

    def create_session(self, images: Sequence[ImageLike] | Mapping[str, ImageLike] = (),
                       texts: Mapping[str, str] | Sequence[str] | None = None, *, profile: str = "default",
                       coords: str | None = None, view: ViewSettings | Mapping | None = None,
                       output: OutputSettings | Mapping | None = None, ttl_s: float | None = None,
                       max_tool_calls: int | None = None) -> Session:
        """A new session holding `images` (keys img_0, img_1, … or the mapping's keys) and `texts`."""
        settings = _session_settings(profile, coords, view, output, ttl_s, max_tool_calls, texts)
        response = self.request("POST", "/v1/sessions", **_image_payload(images, settings))
        return Session(self, SessionCreated.model_validate_json(response.content))

    def session(self, session_id: str) -> Session:
        """A handle on an existing session (for example one created by another process)."""
        return Session(self, _as_created(self.request("GET", f"/v1/sessions/{session_id}")))

    def list_tools(self, profile: str = "default", *, strict: bool = False) -> list[dict[str, Any]]:
        """OpenAI function-calling entries, ready for `tools=` of a chat completion."""
        return self.request("GET", "/v1/tools", params={"profile": profile, "strict": strict}).json()

    def profiles(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/profiles").json()

    def validate(self, items: Iterable[ValidateItem | Mapping[str, Any]]) -> list[ValidateResult]:
        """Many (tool, params, text) checks in one request, without a session; one result per item."""
        response = self.request("POST", "/v1/validate", json=_validate_items(items))
        return ValidateResponse.model_validate_json(response.content).results

    def ready(self) -> dict[str, Any]:
        return self.request("GET", "/readyz").json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


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


class Session(_SessionHandle):
    """One session on the server. Use as a context manager to release it at the end."""

    _client: Client

    def call(self, name: str, arguments: Mapping[str, Any] | None = None, /, *, timeout: float | None = None,
             **kwargs: Any) -> ToolResult:
        """Run one tool: `session.call("zoom_in", image_key="img_0", bbox=[...])` or with a dict."""
        body = {**(arguments or {}), **kwargs}
        response = self._client.request("POST", self._path(f"/tools/{name}"), json=body, timeout=timeout)
        return ToolResult.model_validate_json(response.content)

    def run_tool_calls(self, tool_calls: Iterable[Any], *, image_message: ImageMessage = "tool",
                       timeout: float | None = None) -> ToolCallsResponse:
        """Run an assistant message's OpenAI `tool_calls`; `.messages` are the messages to append."""
        response = self._client.request("POST", self._path("/tool_calls"),
                                        json=_tool_calls_body(tool_calls, image_message), timeout=timeout)
        return ToolCallsResponse.model_validate_json(response.content)

    def act(self, text: str, *, format: str = "auto", timeout: float | None = None) -> ActResponse:
        """Find the tool calls in raw model output, run them, and get the observation to append."""
        response = self._client.request("POST", self._path("/act"), json={"text": text, "format": format},
                                        timeout=timeout)
        return ActResponse.model_validate_json(response.content)

    def add_images(self, images: Sequence[ImageLike] | Mapping[str, ImageLike]) -> list[ImageInfo]:
        response = self._client.request("POST", self._path("/images"), **_image_payload(images, None))
        added = AddedImages.model_validate_json(response.content).images
        self.created.images.extend(added)
        return added

    def add_video(self, video: bytes | str | os.PathLike, *, key: str | None = None,
                  frames_per_second: float | None = None, max_frames: int | None = None) -> AddedImages:
        """A video (MP4/MOV, WebM, MKV; bytes or a local file) as sampled frames, each a session image;
        `.videos[0]` has the frame keys and their timestamps."""
        body = _video_body(video, key, frames_per_second, max_frames)
        added = AddedImages.model_validate_json(self._client.request("POST", self._path("/images"), json=body).content)
        self.created.images.extend(added.images)
        return added

    def add_texts(self, texts: Mapping[str, str] | Sequence[str]) -> list[str]:
        body = {"texts": dict(texts) if isinstance(texts, Mapping) else list(texts)}
        response = self._client.request("POST", self._path("/texts"), json=body)
        return AddedTexts.model_validate_json(response.content).texts

    def info(self) -> SessionInfo:
        return SessionInfo.model_validate_json(self._client.request("GET", self._path()).content)

    def image_bytes(self, key: str, format: str | None = None) -> bytes:
        params = {"format": format} if format else None
        return self._client.request("GET", self._path(f"/images/{key}"), params=params).content

    def release(self) -> None:
        """Free everything the session holds. Releasing a session that is already gone is not an error."""
        with contextlib.suppress(SessionNotFound):
            self._client.request("DELETE", self._path())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


# -- async ---------------------------------------------------------------------------------------
class AsyncClient:
    """The async twin of `Client`, for rollout loops on asyncio. Safe to share across tasks."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 headers: Mapping[str, str] | None = None, limits: httpx.Limits | None = None,
                 transport: httpx.AsyncBaseTransport | None = None):
        self._config = _Config(base_url, api_key, timeout, retries, backoff, max_backoff, headers)
        self._http = httpx.AsyncClient(
            base_url=self._config.base_url, headers=self._config.headers, timeout=self._config.timeout,
            transport=transport,
            limits=limits or httpx.Limits(max_connections=256, max_keepalive_connections=64))

    async def request(self, method: str, path: str, *, timeout: float | None = None,
                      **kwargs: Any) -> httpx.Response:
        if timeout is not None:
            kwargs["timeout"] = timeout
        try:
            async for attempt in AsyncRetrying(**self._config.retrying_kwargs()):
                with attempt:
                    try:
                        return _check(await self._http.request(method, path, **kwargs))
                    except httpx.TransportError as exc:
                        raise _transport_error(exc, self._config.base_url + path) from exc
        except _Retryable as exc:
            raise exc.error from None
        raise AssertionError("unreachable")

    async def create_session(self, images: Sequence[ImageLike] | Mapping[str, ImageLike] = (),
                             texts: Mapping[str, str] | Sequence[str] | None = None, *, profile: str = "default",
                             coords: str | None = None, view: ViewSettings | Mapping | None = None,
                             output: OutputSettings | Mapping | None = None, ttl_s: float | None = None,
                             max_tool_calls: int | None = None) -> AsyncSession:
        settings = _session_settings(profile, coords, view, output, ttl_s, max_tool_calls, texts)
        response = await self.request("POST", "/v1/sessions", **_image_payload(images, settings))
        return AsyncSession(self, SessionCreated.model_validate_json(response.content))

    async def session(self, session_id: str) -> AsyncSession:
        return AsyncSession(self, _as_created(await self.request("GET", f"/v1/sessions/{session_id}")))

    async def list_tools(self, profile: str = "default", *, strict: bool = False) -> list[dict[str, Any]]:
        return (await self.request("GET", "/v1/tools", params={"profile": profile, "strict": strict})).json()

    async def profiles(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/v1/profiles")).json()

    async def validate(self, items: Iterable[ValidateItem | Mapping[str, Any]]) -> list[ValidateResult]:
        response = await self.request("POST", "/v1/validate", json=_validate_items(items))
        return ValidateResponse.model_validate_json(response.content).results

    async def ready(self) -> dict[str, Any]:
        return (await self.request("GET", "/readyz")).json()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class AsyncSession(_SessionHandle):
    """The async twin of `Session`; `async with` releases it."""

    _client: AsyncClient

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None, /, *,
                   timeout: float | None = None, **kwargs: Any) -> ToolResult:
        body = {**(arguments or {}), **kwargs}
        response = await self._client.request("POST", self._path(f"/tools/{name}"), json=body, timeout=timeout)
        return ToolResult.model_validate_json(response.content)

    async def run_tool_calls(self, tool_calls: Iterable[Any], *, image_message: ImageMessage = "tool",
                             timeout: float | None = None) -> ToolCallsResponse:
        response = await self._client.request("POST", self._path("/tool_calls"),
                                              json=_tool_calls_body(tool_calls, image_message), timeout=timeout)
        return ToolCallsResponse.model_validate_json(response.content)

    async def act(self, text: str, *, format: str = "auto", timeout: float | None = None) -> ActResponse:
        response = await self._client.request("POST", self._path("/act"), json={"text": text, "format": format},
                                              timeout=timeout)
        return ActResponse.model_validate_json(response.content)

    async def add_images(self, images: Sequence[ImageLike] | Mapping[str, ImageLike]) -> list[ImageInfo]:
        response = await self._client.request("POST", self._path("/images"), **_image_payload(images, None))
        added = AddedImages.model_validate_json(response.content).images
        self.created.images.extend(added)
        return added

    async def add_video(self, video: bytes | str | os.PathLike, *, key: str | None = None,
                        frames_per_second: float | None = None, max_frames: int | None = None) -> AddedImages:
        body = _video_body(video, key, frames_per_second, max_frames)
        response = await self._client.request("POST", self._path("/images"), json=body)
        added = AddedImages.model_validate_json(response.content)
        self.created.images.extend(added.images)
        return added

    async def add_texts(self, texts: Mapping[str, str] | Sequence[str]) -> list[str]:
        body = {"texts": dict(texts) if isinstance(texts, Mapping) else list(texts)}
        response = await self._client.request("POST", self._path("/texts"), json=body)
        return AddedTexts.model_validate_json(response.content).texts

    async def info(self) -> SessionInfo:
        return SessionInfo.model_validate_json((await self._client.request("GET", self._path())).content)

    async def image_bytes(self, key: str, format: str | None = None) -> bytes:
        params = {"format": format} if format else None
        return (await self._client.request("GET", self._path(f"/images/{key}"), params=params)).content

    async def release(self) -> None:
        with contextlib.suppress(SessionNotFound):
            await self._client.request("DELETE", self._path())

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()
