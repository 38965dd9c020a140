"""OpenEnv's WebSocket protocol for one connection: one episode (one session) per connection, messages handled one
at a time, every bad message answered with OpenEnv's error message while the connection goes on.

As OpenEnv's server (`http_server.py`, `websocket_endpoint`): a slot is taken when the connection opens
(`CAPACITY_REACHED` and the connection closes when there is none), `reset` / `step` answer `observation`, `state`
answers `state`, `close` ends the connection, and the episode's resources go when the connection ends however it
ends. Unlike it, a message that is not a JSON object, or one over the size limit, is answered too rather than
ending the connection, and errors from a bug say no more than that (the details go to the log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from toolserver import jsonio
from toolserver.api.openenv.episode import Episode, reply_for
from toolserver.api.openenv.wire import ErrorCode, error
from toolserver.core import Core
from toolserver.errors import BadRequest, ServiceError
from toolserver.profiles import get_profile

log = logging.getLogger("toolserver")
REFUSAL_WAIT_S = 5.0


class _Envelope(BaseModel):
    """Every client message: its `type` and, for `reset` and `step`, its `data`."""

    model_config = ConfigDict(extra="forbid")
    type: str
    data: dict[str, Any] | None = None


async def serve_episode(websocket: WebSocket, core: Core, profile: str) -> None:
    """The whole life of one connection (already accepted)."""
    try:
        get_profile(profile)
        core.episodes.take()
    except ServiceError as exc:  # an unknown profile (OpenEnv: the factory failed), or no slot left
        reply = reply_for(exc) if exc.status == 503 else error(exc.message, ErrorCode.FACTORY_ERROR,
                                                               factory_name=profile)
        await _refuse(websocket, reply)
        return
    episode = None
    try:
        episode = Episode(core, profile)
        await _converse(websocket, episode, core.settings.openenv_max_message_bytes, core.settings.default_ttl_s)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the client went away mid-answer; what it held goes below
    finally:
        core.episodes.give_back()
        try:
            if episode is not None:
                await episode.close()
        except Exception:  # the store is down or stopping: the session expires by itself
            log.warning("an OpenEnv episode's session could not be released (it will expire)", exc_info=True)
        await _close(websocket)


async def _refuse(websocket: WebSocket, reply: dict[str, Any]) -> None:
    """Send the refusal, then close once the client has sent its first message (OpenEnv's clients send before they
    read: closing at once would fail their send before they could read why) or after a few seconds."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await _send(websocket, reply)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(websocket.receive(), REFUSAL_WAIT_S)
    await _close(websocket)


async def _converse(websocket: WebSocket, episode: Episode, max_bytes: int, idle_s: float) -> None:
    while True:
        try:
            message = await asyncio.wait_for(websocket.receive(), idle_s)
        except TimeoutError:  # an idle connection gives its slot back, as an idle session expires
            await _send(websocket, error(f"Idle for {idle_s:g} s: the episode ended", ErrorCode.SESSION_ERROR))
            return
        if message["type"] == "websocket.disconnect":
            return
        raw = message.get("text")
        if raw is None:
            raw = message.get("bytes")
        if raw is None:
            continue
        if len(raw) > max_bytes:
            await _send(websocket, error(f"Message too large: {len(raw)} bytes, over the limit of {max_bytes}",
                                         ErrorCode.VALIDATION_ERROR))
            continue
        try:
            body = jsonio.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            await _send(websocket, error(f"Invalid JSON: {exc}", ErrorCode.INVALID_JSON))
            continue
        if isinstance(body, dict) and body.get("type") == "close":
            return
        await _send(websocket, await _answer(episode, body))


async def _answer(episode: Episode, body: Any) -> dict[str, Any]:
    try:
        envelope = _Envelope.model_validate(body)
        if envelope.type == "reset":
            return {"type": "observation", "data": (await episode.reset(envelope.data or {})).wire()}
        if envelope.type == "step":
            if envelope.data is None:
                raise BadRequest("a step message carries its action in 'data'")
            return {"type": "observation", "data": (await episode.step(envelope.data)).wire()}
        if envelope.type == "state":
            return {"type": "state", "data": (await episode.state()).model_dump(mode="json")}
        return error(f"Unknown message type: {envelope.type}", ErrorCode.UNKNOWN_TYPE)
    except Exception as exc:
        return reply_for(exc)


async def _send(websocket: WebSocket, reply: dict[str, Any]) -> None:
    try:
        data = orjson.dumps(reply)
    except (TypeError, orjson.JSONEncodeError):  # e.g. integers beyond 64 bits in a column
        data = json.dumps(reply, default=str).encode()
    await websocket.send_text(data.decode())


async def _close(websocket: WebSocket) -> None:
    if websocket.application_state != WebSocketState.DISCONNECTED:
        with contextlib.suppress(RuntimeError, OSError):
            await websocket.close()
