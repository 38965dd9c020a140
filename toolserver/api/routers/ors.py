"""The Open Reward Standard (ORS) endpoint, as `openreward`'s client speaks it (docs/ors.md), at the server's root:
every profile an environment (`/{profile}/tools`, `/splits`, `/tasks`, `/prompt`, `/call`, ...), sessions named by
`POST /create_session` (server-sent events) and the `X-Session-ID` header. The paths without an environment serve
the one the client's `X-Deployment` header names. A thin adapter over `Core.ors` (`toolserver.core.ors`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, model_validator

from toolserver import __version__
from toolserver.api.bodies import BoundedJSONRoute, core_of
from toolserver.core.ors import EpisodeFinished, UnknownTool, environment_of
from toolserver.core.ors_tasks import split_type
from toolserver.errors import BadRequest, ServiceError
from toolserver.profiles import PROFILES

router = APIRouter(route_class=BoundedJSONRoute, tags=["ors"])
HEARTBEAT_S = 10.0
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class CreateBody(BaseModel):
    """`POST /create`: the environment and the task, as a `task_spec` or a `split` and `index`."""

    model_config = ConfigDict(extra="forbid")
    env_name: str | None = None
    task_spec: dict[str, Any] | None = None
    split: str | None = None
    index: int | None = None
    toolset_name: str | None = None

    @model_validator(mode="after")
    def _one_task(self) -> CreateBody:
        if (self.task_spec is not None) == (self.split is not None and self.index is not None):
            raise ValueError("Provide either task_spec or both split and index, not both/neither")
        return self


class ToolCallBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    input: dict[str, Any]
    task_id: str | None = None


class SplitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    split: str


class TaskBody(SplitBody):
    index: int


class TaskRangeBody(SplitBody):
    start: int | None = None
    stop: int | None = None


def _sid(x_session_id: str | None) -> str:
    if not x_session_id or not x_session_id.strip():
        raise BadRequest("X-Session-ID header is required", code="session_id_required")
    return x_session_id.strip()


def _env(env_name: str | None, deployment: str | None) -> str:
    """The path's environment, else the client's `X-Deployment` (its `environments.get(name)`), else `default`."""
    return environment_of(env_name or (deployment or "default").rsplit("/", 1)[-1])


def _events(*events: tuple[str, str]) -> str:
    return "".join(f"event: {name}\ndata: {data}\n\n" for name, data in events)


async def _stream(task_id: str, work: asyncio.Task[dict[str, Any]]) -> AsyncIterator[str]:
    """`task_id`, comment pings while the call runs (the client reads with a 30 s timeout), then `end` with the
    `RunToolOutput`, or `error` for a call that failed outside the standard's error kinds."""
    yield _events(("task_id", task_id))
    while not work.done():
        await asyncio.wait({work}, timeout=HEARTBEAT_S)
        if not work.done():
            yield ": ping\n\n"
    try:
        output = {"ok": True, "output": work.result()}
    except (UnknownTool, EpisodeFinished, BadRequest) as exc:
        reason = {"not_found": "not_found", "episode_finished": "episode_finished"}.get(exc.code, "input_validation")
        output = {"ok": False, "error": exc.message, "reason": reason}
    except ServiceError as exc:
        yield _events(("error", f"{exc.code}: {exc.message}"))
        return
    yield _events(("end", json.dumps(output, separators=(",", ":"))))


def _sse(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=SSE_HEADERS)


@router.get("/list_environments", summary="ORS: the environments (the profiles)")
async def list_environments() -> list[str]:
    return list(PROFILES)


@router.get("/version", summary="ORS: the server's version")
async def version() -> dict[str, str | None]:
    return {"version": __version__, "build_sha": None}


@router.post("/create_session", summary="ORS: a session id (server-sent events: `task_id`, `end`)")
async def create_session(request: Request) -> StreamingResponse:
    sid = core_of(request).ors.new_id()  # refused before the stream opens where ORS cannot serve

    async def events() -> AsyncIterator[str]:
        yield _events(("task_id", sid), ("end", ""))
    return _sse(events())


@router.post("/delete_session", summary="ORS: forget a session id")
async def delete_session(x_session_id: str | None = Header(default=None)) -> dict[str, str]:
    return {"sid": _sid(x_session_id)}


@router.post("/ping", summary="ORS: keep a session alive (sessions unused for 15 minutes end)")
async def ping(request: Request, x_session_id: str | None = Header(default=None)) -> dict[str, str]:
    core_of(request).ors.ping(_sid(x_session_id))
    return {"status": "ok"}


@router.post("/create", summary="ORS: start the session's episode on a task")
async def create(body: CreateBody, request: Request, x_session_id: str | None = Header(default=None),
                 x_deployment: str | None = Header(default=None)) -> dict[str, str]:
    ors, sid = core_of(request).ors, _sid(x_session_id)
    profile = _env(body.env_name, x_deployment)
    spec = body.task_spec if body.task_spec is not None else {"split": body.split, "index": body.index}
    if body.toolset_name is not None:
        raise BadRequest(f"unknown toolset {body.toolset_name!r}: the profile's tools are the environment's")
    await ors.create(sid, profile, ors.tasks.task(profile, spec))
    return {"sid": sid}


@router.post("/delete", summary="ORS: end the session (and its toolserver session)")
async def delete(request: Request, x_session_id: str | None = Header(default=None)) -> dict[str, str]:
    sid = _sid(x_session_id)
    await core_of(request).ors.delete(sid)
    return {"sid": sid}


@router.get("/tools", summary="ORS: the environment's tools", include_in_schema=False)
@router.get("/task_tools", summary="ORS: the session's tools", include_in_schema=False)
@router.get("/{env_name}/task_tools", summary="ORS: the session's tools")
@router.get("/{env_name}/tools", summary="ORS: the environment's tools (and its terminal tool)")
async def tools(request: Request, env_name: str | None = None,
                x_deployment: str | None = Header(default=None)) -> dict[str, Any]:
    return core_of(request).ors.tools(_env(env_name, x_deployment))


@router.get("/splits", summary="ORS: the splits", include_in_schema=False)
@router.get("/{env_name}/splits", summary="ORS: the environment's splits (from the `ors_tasks` setting)")
async def splits(request: Request, env_name: str | None = None,
                 x_deployment: str | None = Header(default=None)) -> list[dict[str, str]]:
    return [{"name": s, "type": split_type(s)} for s in core_of(request).ors.tasks.splits(_env(env_name, x_deployment))]


@router.post("/tasks", summary="ORS: a split's tasks", include_in_schema=False)
@router.post("/{env_name}/tasks", summary="ORS: a split's task specs")
async def tasks(body: SplitBody, request: Request, env_name: str | None = None,
                x_deployment: str | None = Header(default=None)) -> dict[str, Any]:
    name = _env(env_name, x_deployment)
    return {"tasks": core_of(request).ors.tasks.tasks(name, body.split), "env_name": name}


@router.post("/num_tasks", summary="ORS: a split's size", include_in_schema=False)
@router.post("/{env_name}/num_tasks", summary="ORS: a split's size")
async def num_tasks(body: SplitBody, request: Request, env_name: str | None = None,
                    x_deployment: str | None = Header(default=None)) -> dict[str, int]:
    return {"num_tasks": len(core_of(request).ors.tasks.tasks(_env(env_name, x_deployment), body.split))}


@router.post("/task", summary="ORS: one task spec", include_in_schema=False)
@router.post("/{env_name}/task", summary="ORS: one task spec")
async def task(body: TaskBody, request: Request, env_name: str | None = None,
               x_deployment: str | None = Header(default=None)) -> dict[str, Any]:
    name = _env(env_name, x_deployment)
    specs = core_of(request).ors.tasks.tasks(name, body.split)
    if not 0 <= body.index < len(specs):
        raise BadRequest("Invalid index", code="invalid_index")
    return {"task": specs[body.index], "env_name": name}


@router.post("/task_range", summary="ORS: a range of task specs", include_in_schema=False)
@router.post("/{env_name}/task_range", summary="ORS: a range of task specs")
async def task_range(body: TaskRangeBody, request: Request, env_name: str | None = None,
                     x_deployment: str | None = Header(default=None)) -> dict[str, Any]:
    name = _env(env_name, x_deployment)
    specs = core_of(request).ors.tasks.tasks(name, body.split)
    return {"tasks": specs[body.start:body.stop], "env_name": name}


@router.get("/prompt", summary="ORS: the session's prompt", include_in_schema=False)
@router.get("/{env_name}/prompt", summary="ORS: the task's images and question (`TextBlock`s, `ImageBlock`s)")
async def prompt(request: Request, env_name: str | None = None,
                 x_session_id: str | None = Header(default=None)) -> list[dict[str, Any]]:
    """The session's task (its environment is the session's; `env_name` is the path's)."""
    return await core_of(request).ors.prompt(_sid(x_session_id))


@router.post("/call", summary="ORS: call a tool", include_in_schema=False)
@router.post("/{env_name}/call", summary="ORS: call a tool (server-sent events: `task_id`, then `end` with the "
             "`RunToolOutput`, whose `ToolOutput` carries `reward` and `finished`)")
async def call(body: ToolCallBody, request: Request, env_name: str | None = None,
               x_session_id: str | None = Header(default=None)) -> StreamingResponse:
    """The session's call (its environment is the session's; `env_name` is the path's)."""
    ors, sid = core_of(request).ors, _sid(x_session_id)
    ors.get(sid)  # an unknown or expired session: 404 before the stream opens
    if body.task_id is not None:  # a resumed stream: calls are not replayed (docs/ors.md)
        async def unknown() -> AsyncIterator[str]:
            yield _events(("error", "unknown task_id"))
        return _sse(unknown())
    work: Coroutine[Any, Any, dict[str, Any]] = ors.call(sid, body.name, body.input)
    return _sse(_stream(uuid.uuid4().hex, asyncio.create_task(work)))
