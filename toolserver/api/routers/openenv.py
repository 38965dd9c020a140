"""Every profile as an OpenEnv environment, under `/openenv/{profile}`: `openenv-core`'s clients
(`GenericEnvClient(base_url="http://HOST:PORT/openenv/<profile>")`) work unmodified.

- `WS /ws`: one episode per connection (`toolserver.api.openenv.socket`); many at once, up to the
  `openenv_max_episodes` setting.
- `POST /reset`, `POST /step`: OpenEnv's one-shot HTTP calls; each runs in a fresh episode that ends with the request
  (a step's request may carry the reset inputs, `images` and `texts`, for that fresh episode).
- `GET /schema` (action, observation and state JSON Schemas), `/metadata`, `/health`, `/state`, `/openapi.json` (this
  environment's routes, as `openenv validate --url` reads them).
- `/mcp`: MCP, both the SDK's streamable HTTP and OpenEnv's plain JSON-RPC (`toolserver.api.openenv.mcp`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, WebSocket
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from toolserver import __version__
from toolserver.api.bodies import BoundedJSONRoute, core_of, json_body, json_response, validate
from toolserver.api.openenv.docs import environment_document
from toolserver.api.openenv.episode import Episode
from toolserver.api.openenv.socket import serve_episode
from toolserver.api.openenv.wire import (
    EnvironmentMetadata,
    EpisodeObservation,
    EpisodeState,
    ResetInputs,
    StepRequest,
    action_model,
)
from toolserver.errors import NotFound, ServiceError
from toolserver.ownership import caller
from toolserver.profiles import Profile, get_profile

router = APIRouter(route_class=BoundedJSONRoute, tags=["openenv"])


class OneShotResponse(BaseModel):
    """OpenEnv's `ResetResponse` / `StepResponse`."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


def _profile(name: str) -> Profile:
    try:
        return get_profile(name)
    except ServiceError:
        raise NotFound(f"no profile {name!r} (see /v1/profiles)", code="unknown_profile") from None


@router.websocket("/openenv/{profile}/ws")
async def episode_socket(websocket: WebSocket, profile: str) -> None:
    keys = getattr(websocket.app.state, "keys", None)
    if keys:  # the HTTP key check does not see WebSockets: the handshake carries the key
        accepted, owner = keys.identify(websocket.headers.get("authorization", ""))
        if not accepted:
            await websocket.close(code=1008)  # before accepting: the client sees HTTP 403
            return
        caller.set(owner)
    await websocket.accept()
    await serve_episode(websocket, websocket.app.state.core, profile)


@router.get("/openenv/{profile}/health", summary="OpenEnv: health")
async def health(profile: str) -> dict[str, str]:
    _profile(profile)
    return {"status": "healthy"}


@router.get("/openenv/{profile}/metadata", response_model=EnvironmentMetadata, summary="OpenEnv: metadata")
async def metadata(profile: str) -> EnvironmentMetadata:
    found = _profile(profile)
    return EnvironmentMetadata(name=found.name, description=found.description, version=__version__,
                               author="toolserver", documentation_url="/docs#/openenv")


@router.get("/openenv/{profile}/schema", summary="OpenEnv: the action, observation and state JSON Schemas")
async def schema(profile: str) -> dict[str, Any]:
    found = _profile(profile)
    return {"action": action_model(found.name).model_json_schema(),
            "observation": EpisodeObservation.model_json_schema(), "state": EpisodeState.model_json_schema()}


@router.get("/openenv/{profile}/openapi.json", summary="OpenEnv: this environment's OpenAPI document")
async def environment_openapi(profile: str, request: Request) -> dict[str, Any]:
    return environment_document(request.app.openapi(), _profile(profile).name, __version__)


@router.get("/openenv/{profile}/state", response_model=EpisodeState, summary="OpenEnv: the state of a fresh episode")
async def state(profile: str) -> EpisodeState:
    return EpisodeState(profile=_profile(profile).name)


def _json_body(schema: str) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its JSON by hand (its schema is added with the messages')."""
    return {"requestBody": {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
                            "required": schema == "StepRequest"}}


@router.post("/openenv/{profile}/reset", response_model=OneShotResponse, openapi_extra=_json_body("ResetInputs"),
             summary="OpenEnv: reset a fresh episode (its session ends with the request)")
async def reset(profile: str, request: Request) -> Response:
    core, name = core_of(request), _profile(profile).name
    body = validate(ResetInputs, await json_body(request))
    with core.episodes.held():
        episode = Episode(core, name)
        try:
            observation = await episode.reset(body)
        finally:
            await episode.close()
    return json_response(OneShotResponse(**observation.wire()))


@router.post("/openenv/{profile}/step", response_model=OneShotResponse, openapi_extra=_json_body("StepRequest"),
             summary="OpenEnv: one step in a fresh episode (its session ends with the request)")
async def step(profile: str, request: Request) -> Response:
    core, name = core_of(request), _profile(profile).name
    body = validate(StepRequest, await json_body(request))
    try:
        action = action_model(name).model_validate(body.action)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", "action", *e["loc"])}
                                      for e in exc.errors(include_url=False, include_context=False)]) from None
    inputs = body.model_dump(exclude_unset=True, exclude={"action", "timeout_s", "request_id"})
    with core.episodes.held():
        episode = Episode(core, name)
        try:
            await episode.reset(inputs)
            observation = await episode.step(action)
        finally:
            await episode.close()
    if body.request_id is not None:
        observation.metadata["request_id"] = body.request_id
    return json_response(OneShotResponse(**observation.wire()))
