"""Tools: their schemas per profile, the profiles themselves, and running calls (one, OpenAI `tool_calls`, a
raw model turn through `/act`), plus batch validation without a session."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request, Response

from toolserver.api.bodies import (
    MSGPACK,
    BoundedJSONRoute,
    base_url,
    core_of,
    json_response,
    msgpack_response,
    wants_msgpack,
)
from toolserver.geometry import Coords
from toolserver.models import (
    ActRequest,
    ActResponse,
    ToolCallsRequest,
    ToolCallsResponse,
    ToolResult,
    ValidateRequest,
    ValidateResponse,
)
from toolserver.profiles import PROFILES

router = APIRouter(route_class=BoundedJSONRoute)

IdempotencyHeader = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=200, description=(
        "Names this call (any unique string; the Python client sends a fresh UUID and reuses it on retries). A "
        "retry with the same key returns the recorded result instead of running the tool again; the session keeps "
        "the outcomes of its latest 16 calls. The same key with another tool or other arguments: 409 "
        "`idempotency_key_reused`."))]


@router.get("/v1/tools", tags=["tools"], summary="Tools as OpenAI function-calling entries")
async def list_tools(request: Request, profile: str = "default", strict: bool = False,
                     coords: Coords | None = None) -> list[dict[str, Any]]:
    return core_of(request).list_tools(profile, strict=strict, coords=coords)


@router.get("/v1/profiles", tags=["tools"], summary="The profiles and their tools")
async def list_profiles() -> list[dict[str, Any]]:
    return [{"name": p.name, "description": p.description, "tools": list(p.tools), "aliases": p.aliases,
             "call_format": p.format.name, "coords": str(p.coords), "max_tool_calls": p.max_tool_calls,
             "source": PROFILES.source(name)}
            for name, p in PROFILES.items()]


@router.post("/v1/sessions/{session_id}/tools/{name}", response_model=ToolResult, tags=["tools"],
             summary="Execute one tool with a JSON arguments object",
             responses={200: {"content": {MSGPACK: {}}, "description": (
                 "JSON; or, with `Accept: application/msgpack`, the same fields as msgpack with each inline image's "
                 "`data` as its bytes (no base64: a quarter fewer bytes, and nothing to decode)")}})
async def call_tool(session_id: str, name: str, request: Request,
                    arguments: Annotated[dict[str, Any] | None, Body()] = None,
                    idempotency_key: IdempotencyHeader = None) -> Response:
    binary = wants_msgpack(request)
    result = await core_of(request).call_tool(session_id, name, arguments or {}, base_url=base_url(request),
                                              binary=binary, idempotency_key=idempotency_key)
    return msgpack_response(result) if binary else json_response(result)


@router.post("/v1/sessions/{session_id}/tool_calls", response_model=ToolCallsResponse, tags=["tools"],
             summary="Execute OpenAI tool_calls; returns the messages to append")
async def tool_calls(session_id: str, body: ToolCallsRequest, request: Request) -> Response:
    result = await core_of(request).execute_tool_calls(session_id, body.tool_calls, body.image_message,
                                                       base_url=base_url(request))
    return json_response(result)


@router.post("/v1/sessions/{session_id}/act", response_model=ActResponse, tags=["tools"],
             summary="Parse raw model output, run the tool calls in it, render the observation")
async def act(session_id: str, body: ActRequest, request: Request,
              idempotency_key: IdempotencyHeader = None) -> Response:
    return json_response(await core_of(request).act(session_id, body.text, body.format, base_url=base_url(request),
                                                    idempotency_key=idempotency_key))


@router.post("/v1/validate", response_model=ValidateResponse, tags=["validation"],
             summary="Check many texts against the instruction-following validators, without a session")
async def validate(body: ValidateRequest, request: Request) -> Response:
    """For reward computation: each item is `{"tool", "params", "text"}`; results come back in the same
    order, `{"ok": true, "result": bool, "text": "Check result: …"}` or `{"ok": false, "error": {...}}`
    for an item whose validator, parameters or text is unusable (the rest of the batch still runs)."""
    return json_response(await core_of(request).validate(body.items))
