"""ORS sessions (Open Reward Standard, as `openreward`'s client speaks it; docs/ors.md) over the core: each profile
an environment with its tools and a terminal tool (the assistant's final message, run as `/act` runs a turn); a
session is a toolserver session of the task's images, and each call's output carries the profile's `finished`
and reward (0 before the end, the profile's reward over the session's call log at the end, `None` for a profile
without one). Sessions unused for `ors_idle_timeout_s` (the standard's 15 minutes) end."""

from __future__ import annotations

import base64
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolserver.config import Settings
from toolserver.core.ors_tasks import Task, TaskSets
from toolserver.errors import BadRequest, Conflict, NotFound, ServiceError, SessionGone
from toolserver.models import ActResponse, CreateSessionRequest, ImageInput, SessionCreated, SessionInfo
from toolserver.ownership import caller
from toolserver.profiles import get_profile
from toolserver.reward_models import SessionReward, SessionRewardRequest
from toolserver.rewards import Reward

TERMINAL_TOOL = "final_answer"  # the assistant's plain message, fed back by the harness (ORS's `@terminal` tool)
TERMINAL_ARG = "message"
TERMINAL_DESCRIPTION = ("The assistant's final message: run as a turn of the profile's format; it ends the episode "
                        "unless it holds a tool call.")


class EpisodeFinished(ServiceError):
    status = 409
    code = "episode_finished"


class UnknownTool(ServiceError):
    status = 404
    code = "not_found"


class OrsCore(Protocol):
    """What of `toolserver.core.Core` the ORS sessions use (the facade imports this module)."""

    settings: Settings

    def list_tools(self, profile: str = "default") -> list[dict[str, Any]]: ...
    async def create_session(self, request: CreateSessionRequest | None = None) -> SessionCreated: ...
    async def session_info(self, session_id: str) -> SessionInfo: ...
    async def image_bytes(self, session_id: str, key: str, fmt: str | None = None) -> tuple[bytes, str]: ...
    async def act(self, session_id: str, text: str) -> ActResponse: ...
    async def call_as_turn(self, session_id: str, name: str, arguments: dict[str, Any] | str) -> ActResponse: ...
    def reward_of(self, profile: str) -> Reward: ...
    async def reward(self, session_id: str, body: SessionRewardRequest) -> SessionReward: ...
    async def release(self, session_id: str) -> None: ...


@dataclass
class OrsSession:
    profile: str
    task: Task
    session_id: str
    owner: str | None
    seen: float = field(default_factory=time.monotonic)
    turns: list[str] = field(default_factory=list)
    finished: bool = False


def environment_of(name: str) -> str:
    """The profile an environment name names (ORS names are case-insensitive)."""
    try:
        return get_profile(name.lower()).name
    except ServiceError:
        raise NotFound(f"unknown environment {name!r}: the environments are the profiles (see /v1/profiles)",
                       code="unknown_environment") from None


class OrsSessions:
    def __init__(self, core: OrsCore):
        self.core = core
        self.tasks = TaskSets(core.settings.ors_tasks)
        self._sessions: dict[str, OrsSession] = {}

    def new_id(self) -> str:
        """A session id (`/create_session`); the session itself starts at `/create`."""
        self._one_process()
        return str(uuid.uuid4())

    def _one_process(self) -> None:
        """ORS sessions live in this process: refused, with the remedy, where several server processes share a
        port (a session's next request could reach another one)."""
        if self.core.settings.worker_index is not None:
            raise Conflict("ORS sessions live in one server process: serve ORS with one worker (`toolserver serve "
                           "--workers 1`, TOOLSERVER_WORKERS=1)", code="ors_needs_one_process")

    def tools(self, profile: str) -> dict[str, Any]:
        """The environment's tools (`ListToolsOutput`): the profile's, and its terminal tool."""
        tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                  "input_schema": t["function"].get("parameters")} for t in self.core.list_tools(profile)]
        if self.core.settings.ors_terminal_in_tools:
            tools.append({"name": TERMINAL_TOOL, "description": TERMINAL_DESCRIPTION, "input_schema": {
                "type": "object", "properties": {TERMINAL_ARG: {"type": "string", "description": "The message."}},
                "required": [TERMINAL_ARG]}})
        return {"tools": tools, "terminal_tool": {"name": TERMINAL_TOOL, "arg": TERMINAL_ARG,
                                                  "description": TERMINAL_DESCRIPTION},
                "supports_score_group": False, "message_block_types": ["text", "image"]}

    async def create(self, sid: str, profile: str, task: Task) -> None:
        self._one_process()
        await self.sweep()
        if sid in self._sessions:
            raise BadRequest("Session already exists", code="session_exists")
        images = [ImageInput(data=image) for image in task.images]
        created = await self.core.create_session(CreateSessionRequest(profile=profile, images=images))
        self._sessions[sid] = OrsSession(profile, task, created.session_id, caller.get())

    def get(self, sid: str) -> OrsSession:
        session = self._sessions.get(sid)
        if session is None or session.owner != caller.get():
            raise NotFound("Active environment not found (unknown or expired session)", code="unknown_session")
        session.seen = time.monotonic()
        return session

    async def prompt(self, sid: str) -> list[dict[str, Any]]:
        """The task's images (as the session holds them) and then its question."""
        session = self.get(sid)
        info = await self.core.session_info(session.session_id)
        blocks = []
        for image in info.images:
            data, mime = await self.core.image_bytes(session.session_id, image.key)
            blocks.append(image_block(base64.b64encode(data).decode(), mime))
        return [*blocks, {"type": "text", "text": session.task.question}]

    async def call(self, sid: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One call as `/act` answers it (`call_as_turn`), or the terminal tool's message as `/act`'s turn: the
        standard's `ToolOutput`."""
        session = self.get(sid)
        if session.finished:
            raise EpisodeFinished("the episode has finished: open a new session")
        if name == TERMINAL_TOOL:
            message = arguments.get(TERMINAL_ARG, "")
            if not isinstance(message, str):
                raise BadRequest(f"Tool input validation error: `{TERMINAL_ARG}` must be a string")
            session.turns.append(message)
            response = await self.core.act(session.session_id, message)
        else:
            if name not in {t["function"]["name"] for t in self.core.list_tools(session.profile)}:
                raise UnknownTool(f"{name!r} is not a valid tool of {session.profile!r}")
            response = await self.core.call_as_turn(session.session_id, name, arguments)
        session.finished = response.done
        metadata = {"session_id": session.session_id, "format": response.format, "calls": response.calls,
                    "prompt": response.prompt, "results": [r.model_dump(mode="json") for r in response.results]}
        reward = await self._reward(session, response, metadata)
        return {"blocks": blocks_of(response), "metadata": metadata, "reward": reward, "finished": response.done}

    async def _reward(self, session: OrsSession, response: ActResponse, metadata: dict[str, Any]) -> float | None:
        try:
            self.core.reward_of(session.profile)
        except ServiceError:
            return None  # a profile without a reward (GET /v1/rewards lists them)
        if not response.done:
            return 0.0
        try:
            scored = await self.core.reward(session.session_id, SessionRewardRequest(
                turns=session.turns, ground_truth=session.task.ground_truth, question=session.task.question,
                extra=session.task.extra))
        except ServiceError as exc:  # the call ran and its output stands: the reward's failure is said beside it
            metadata["reward_error"] = {"code": exc.code, "message": exc.message}
            return None
        metadata["reward"] = scored.model_dump(mode="json")
        return scored.total

    def ping(self, sid: str) -> None:
        self.get(sid)

    async def delete(self, sid: str) -> None:
        session = self._sessions.get(sid)
        if session is not None and session.owner != caller.get():
            return  # another caller's session is not this caller's to end
        self._sessions.pop(sid, None)
        if session is not None:
            with contextlib.suppress(NotFound, SessionGone):
                await self.core.release(session.session_id)

    async def sweep(self) -> None:
        """End the sessions idle past `ors_idle_timeout_s`."""
        cutoff = time.monotonic() - self.core.settings.ors_idle_timeout_s
        for sid, session in list(self._sessions.items()):
            if session.seen < cutoff:
                self._sessions.pop(sid, None)
                with contextlib.suppress(NotFound, SessionGone):
                    await self.core.release(session.session_id)


def image_block(data: str, mime: str) -> dict[str, Any]:
    return {"type": "image", "data": data, "mimeType": mime}


def blocks_of(response: ActResponse) -> list[dict[str, Any]]:
    """The observation's messages as ORS blocks: texts as `TextBlock`s, data-URL images as `ImageBlock`s."""
    blocks: list[dict[str, Any]] = []
    for message in response.observation:
        content = message.get("content")
        parts: list[dict[str, Any]] = [{"type": "text", "text": content}] if isinstance(content, str) else \
            content or []
        for part in parts:
            if part.get("type") == "text":
                blocks.append({"type": "text", "text": part["text"]})
            elif part.get("type") == "image_url":
                url = part["image_url"]["url"]
                if url.startswith("data:") and ";base64," in url:
                    header, data = url.split(",", 1)
                    blocks.append(image_block(data, header[5:].split(";", 1)[0]))
                else:
                    blocks.append({"type": "text", "text": url})
    return blocks
