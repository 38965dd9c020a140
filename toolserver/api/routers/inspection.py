"""What the model saw: a session's trajectory (images and calls in order) and the list of live sessions."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from toolserver import jsonio
from toolserver.api.bodies import BoundedJSONRoute, core_of, json_response
from toolserver.config import Settings
from toolserver.errors import Forbidden
from toolserver.models import SessionList, Trajectory

router = APIRouter(route_class=BoundedJSONRoute, tags=["inspection"])


def listing_allowed(settings: Settings) -> bool:
    """Whether `GET /v1/sessions` may answer. A session id is the only key to a session's data, so listing
    them is on where callers must hold an API key, or where only this machine can connect (loopback)."""
    if settings.session_list != "auto":
        return settings.session_list == "on"
    if settings.api_keys:
        return True
    try:
        return ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        return settings.host == "localhost"


@router.get("/v1/sessions/{session_id}/trajectory", response_model=Trajectory,
            responses={200: {"content": {"application/x-ndjson": {}}}},
            summary="The session's images and its tool calls in order (`?format=jsonl`: one call per line)")
async def trajectory(session_id: str, request: Request,
                     format: Annotated[str, Query(pattern="^(json|jsonl)$")] = "json") -> Response:
    found = await core_of(request).trajectory(session_id)
    if format == "jsonl":
        lines = (jsonio.dump_model(call) + b"\n" for call in found.calls)
        return StreamingResponse(lines, media_type="application/x-ndjson")
    return json_response(found)


@router.get("/v1/sessions", response_model=SessionList,
            summary="Live sessions, oldest first, paged (needs an API key, or a server on loopback)")
async def list_sessions(request: Request, offset: Annotated[int, Query(ge=0)] = 0,
                        limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Response:
    core = core_of(request)
    if not listing_allowed(core.settings):
        raise Forbidden("listing sessions is off: it would reveal session ids to anyone who can reach this "
                        "server. Configure API keys, or set TOOLSERVER_SESSION_LIST=on", code="listing_disabled")
    return json_response(await core.list_sessions(offset, limit))
