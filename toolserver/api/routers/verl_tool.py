"""verl-tool's tool-server protocol (`POST /get_observation`, `GET /health`), so that a verl-tool trainer points its
`tool_server_url` here and changes nothing else. The logic is `toolserver.core.verl_tool`; the profile is the
`verl_tool_profile` setting, or the one named in the `/verl-tool/{profile}/...` paths."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request, Response

from toolserver.api.bodies import OrjsonRoute, core_of, json_response
from toolserver.core.verl_tool import ObservationRequest, ObservationResponse

router = APIRouter(route_class=OrjsonRoute, tags=["verl-tool"])

_OBSERVATION_DOC = ("One turn of each trajectory in the batch, as verl-tool's tool server answers it: a trajectory "
                    "is a session, created from the images in its `extra_fields` the first time its id is seen and "
                    "released by `finish`.")


@router.post("/get_observation", response_model=ObservationResponse, summary="verl-tool: observations",
             description=_OBSERVATION_DOC)
async def get_observation(request: Request, body: ObservationRequest) -> Response:
    return json_response(await core_of(request).get_observation(body))


@router.post("/verl-tool/{profile}/get_observation", response_model=ObservationResponse,
             summary="verl-tool: observations, for the profile named", description=_OBSERVATION_DOC)
async def get_observation_for(request: Request, profile: str, body: ObservationRequest) -> Response:
    return json_response(await core_of(request).get_observation(body, profile))


@router.get("/health", summary="verl-tool: health (its tool server's shape)")
async def health(request: Request) -> dict[str, Any]:
    return _health(request, None)


@router.get("/verl-tool/{profile}/health", summary="verl-tool: health, for the profile named")
async def health_for(request: Request, profile: str) -> dict[str, Any]:
    return _health(request, profile)


def _health(request: Request, profile: str | None) -> dict[str, Any]:
    core = core_of(request)
    bridge = core.verl_tool(profile)
    return {"status": "healthy", "concurrent_requests": request.app.state.gate.in_flight,
            "thread_pool_size": core.settings.threads, "active_tasks": bridge.trajectories,
            "max_concurrent": core.settings.queue_limit, "tools": bridge.tool_names,
            "uptime_seconds": time.time() - core.started}
