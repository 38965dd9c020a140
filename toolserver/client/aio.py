"""The asynchronous client (`AsyncClient`) and its session handle (`AsyncSession`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx
from tenacity import AsyncRetrying

from toolserver.client.errors import (
    SessionNotFound,
    _check,
    _keyed,
    _Retryable,
    _transport_error,
)
from toolserver.client.payloads import (
    DEFAULT_URL,
    ImageLike,
    ImageMessage,
    _as_created,
    _Config,
    _image_payload,
    _session_settings,
    _SessionHandle,
    _tool_calls_body,
    _tool_result,
    _validate_items,
    _video_body,
    _with_session_header,
)
from toolserver.models import (
    ActResponse,
    AddedImages,
    AddedTexts,
    ImageInfo,
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
from toolserver.reward_models import RewardItem, RewardsResponse, SessionReward, SessionRewardRequest


# -- async ---------------------------------------------------------------------------------------
class AsyncClient:
    """The async twin of `Client`, for rollout loops on asyncio. Safe to share across tasks."""

    def __init__(self, base_url: str = DEFAULT_URL, *, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 4, backoff: float = 0.5, max_backoff: float = 30.0,
                 headers: Mapping[str, str] | None = None, limits: httpx.Limits | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, binary: bool = True):
        self._config = _Config(base_url, api_key, timeout, retries, backoff, max_backoff, headers, binary)
        self._http = httpx.AsyncClient(
            base_url=self._config.base_url, headers=self._config.headers, timeout=self._config.timeout,
            transport=transport,
            limits=limits or httpx.Limits(max_connections=256, max_keepalive_connections=64))

    async def request(self, method: str, path: str, *, timeout: float | None = None,
                      **kwargs: Any) -> httpx.Response:
        if timeout is not None:
            kwargs["timeout"] = timeout
        kwargs = _with_session_header(path, kwargs)
        try:
            async for attempt in AsyncRetrying(**self._config.retrying_kwargs()):
                with attempt:
                    try:
                        return _check(await self._http.request(method, path, **kwargs), _keyed(kwargs))
                    except httpx.TransportError as exc:
                        raise _transport_error(exc, self._config.base_url + path, _keyed(kwargs)) from exc
        except _Retryable as exc:
            raise exc.error from None
        raise AssertionError("unreachable")

    async def create_session(self, images: Sequence[ImageLike] | Mapping[str, ImageLike] = (),
                             texts: Mapping[str, str] | Sequence[str] | None = None, *, profile: str = "default",
                             coords: str | None = None, view: ViewSettings | Mapping | None = None,
                             output: OutputSettings | Mapping | None = None, ttl_s: float | None = None,
                             max_tool_calls: int | None = None, input_form: str | None = None,
                             image_marker: str | None = None) -> AsyncSession:
        settings = _session_settings(profile, coords, view, output, ttl_s, max_tool_calls, texts, input_form,
                                     image_marker)
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

    async def rewards(self, profile: str, items: Iterable[RewardItem | Mapping[str, Any]], *,
                      timeout: float | None = None) -> RewardsResponse:
        """Score episodes without sessions (a GRPO group: give each item's `group`) with `profile`'s reward."""
        body = {"profile": profile, "items": [RewardItem.model_validate(x).model_dump(mode="json") for x in items]}
        response = await self.request("POST", "/v1/rewards", json=body, timeout=timeout)
        return RewardsResponse.model_validate_json(response.content)

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
                   timeout: float | None = None, idempotency_key: str | None = None, **kwargs: Any) -> ToolResult:
        body = {**(arguments or {}), **kwargs}
        response = await self._client.request("POST", self._path(f"/tools/{name}"), json=body, timeout=timeout,
                                              headers=self._client._config.call_headers(idempotency_key))
        return _tool_result(response)

    async def run_tool_calls(self, tool_calls: Iterable[Any], *, image_message: ImageMessage = "tool",
                             timeout: float | None = None) -> ToolCallsResponse:
        response = await self._client.request("POST", self._path("/tool_calls"),
                                              json=_tool_calls_body(tool_calls, image_message), timeout=timeout)
        return ToolCallsResponse.model_validate_json(response.content)

    async def act(self, text: str, *, format: str = "auto", timeout: float | None = None) -> ActResponse:
        response = await self._client.request("POST", self._path("/act"), json={"text": text, "format": format},
                                              timeout=timeout,
                                              headers=self._client._config.call_headers(None, results=False))
        return ActResponse.model_validate_json(response.content)

    async def reward(self, ground_truth: Any = None, *, response: str = "", turns: Sequence[str] = (),
                     question: str | None = None, extra: Mapping[str, Any] | None = None,
                     timeout: float | None = None) -> SessionReward:
        """This session's episode (its call log, with the turns and response given) scored by its profile's reward."""
        body = SessionRewardRequest(response=response, ground_truth=ground_truth, turns=list(turns), question=question,
                                    extra=dict(extra or {})).model_dump(mode="json")
        answer = await self._client.request("POST", self._path("/reward"), json=body, timeout=timeout)
        return SessionReward.model_validate_json(answer.content)

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
