"""What the model saw: a session's trajectory (images and calls in order), the list of live sessions, and the
finished sessions kept in the trajectory archive (their trajectories and image thumbnails)."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from toolserver import jsonio
from toolserver.api.bodies import BoundedJSONRoute, core_of, json_response
from toolserver.config import Settings
from toolserver.core.archive import FinishedSessionList, FinishedTrajectory, Outcome
from toolserver.errors import Forbidden
from toolserver.models import SessionList, Trajectory

router = APIRouter(route_class=BoundedJSONRoute, tags=["inspection"])


# Headers a reverse proxy adds: a request that carries one came from elsewhere, whatever its peer address.
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")


def on_this_machine(request: Request) -> bool:
    """Whether the caller is on this machine: a loopback peer, through no proxy that says it forwarded."""
    try:
        loopback = request.client is not None and ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:
        return False
    return loopback and not any(header in request.headers for header in PROXY_HEADERS)


def listing_allowed(settings: Settings, request: Request) -> bool:
    """Whether the session lists may answer. A session id is the only key to a session's data without API keys,
    so listing them is on where callers must hold a key, where only this machine can connect (a loopback host),
    or for a caller on this machine (`toolserver serve --host 0.0.0.0` lists to a browser on the same machine,
    not to one elsewhere, nor to anyone through a local reverse proxy that adds forwarding headers)."""
    if settings.session_list != "auto":
        return settings.session_list == "on"
    if settings.api_keys:
        return True
    try:
        bound_to_loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        bound_to_loopback = settings.host == "localhost"
    return bound_to_loopback or on_this_machine(request)


def check_listing(request: Request) -> None:
    if not listing_allowed(core_of(request).settings, request):
        raise Forbidden("listing sessions is off for callers on other machines: it would reveal session ids to "
                        "anyone who can reach this server. Configure API keys, or set TOOLSERVER_SESSION_LIST=on",
                        code="listing_disabled")


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
            summary="Live sessions, oldest first, paged (needs an API key, or a caller on this machine)")
async def list_sessions(request: Request, offset: Annotated[int, Query(ge=0)] = 0,
                        limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Response:
    check_listing(request)
    return json_response(await core_of(request).list_sessions(offset, limit))


@router.get("/v1/trajectories", response_model=FinishedSessionList,
            summary="Finished sessions kept in the trajectory archive, newest first, filtered and paged (needs an API "
                    "key, or a caller on this machine)")
async def list_finished(request: Request, offset: Annotated[int, Query(ge=0)] = 0,
                        limit: Annotated[int, Query(ge=1, le=500)] = 50,
                        profile: Annotated[str | None, Query(max_length=200, description="Only this profile")] = None,
                        outcome: Annotated[Outcome | None, Query(description="Only sessions that ended so")] = None,
                        q: Annotated[str | None, Query(max_length=200, description="Text in the session id")] = None,
                        failed: Annotated[bool | None, Query(description=(
                            "true: only sessions with a failed call; false: only those without"))] = None) -> Response:
    check_listing(request)
    found = await core_of(request).finished_sessions(offset, limit, profile=profile, outcome=outcome, query=q or None,
                                                     failed=failed)
    return json_response(found)


@router.get("/v1/trajectories/{session_id}", response_model=FinishedTrajectory,
            summary="A finished session's trajectory (its images as thumbnails under .../images/{key})")
async def finished_trajectory(session_id: str, request: Request) -> Response:
    return json_response(await core_of(request).finished_trajectory(session_id))


@router.get("/v1/trajectories/{session_id}/images/{key}", responses={200: {"content": {"image/jpeg": {}}}},
            summary="A thumbnail of a finished session's image (JPEG, at most 512 px a side)")
async def finished_image(session_id: str, key: str, request: Request) -> Response:
    return Response(await core_of(request).finished_image(session_id, key), media_type="image/jpeg")
