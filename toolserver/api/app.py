"""`create_app`: the FastAPI application over one `Core`, laid out as FastAPI's "bigger applications" guide
describes: the routers (one per resource) included here, with the error handlers, the API-key check, the
middleware and the OpenAPI document's hand-described parts.

Protocol problems are HTTP errors (`{"detail", "code"}` bodies); tool-level failures are 200 with `ok:false` in
the ToolResult, so an RL loop can feed them back to the model.
"""

from __future__ import annotations

import re
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from toolserver import __version__
from toolserver.api.apidocs import OPEN_DOC_PATHS, add_api_docs
from toolserver.api.bodies import BoundedJSONRoute, error_body
from toolserver.api.openenv.docs import document_openenv
from toolserver.api.routers import (
    documents,
    inspection,
    openenv,
    operations,
    ors,
    rewards,
    sessions,
    tools,
    verl_tool,
    vrag,
)
from toolserver.api.routers.operations import UI_FILES
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.errors import ServiceError, Unauthorized
from toolserver.formats import FORMATS
from toolserver.middleware import (
    BodyLimit,
    DrainGate,
    GiveBackAfterLarge,
    ProcessTime,
    RequestContext,
    internal_error_body,
)
from toolserver.models import AddImagesRequest, CreateSessionRequest, IngestPathRequest
from toolserver.ownership import Keys, caller

OPEN_PATHS = {"/healthz", "/readyz", "/health", "/openapi.json", "/ui", *OPEN_DOC_PATHS,
              *(f"/ui/{f}" for f in UI_FILES)}

DESCRIPTION = """
Tools for vision-language models that think with images: zoom into a box, look back at an earlier
image, and more, served per session over an indexed memory map of images and texts.

Upload an image once (`POST /v1/sessions`), then call tools by key or index. Tool-level failures
(a bad box, an unknown image) come back as `ok:false` with text the model can read; HTTP errors are
for protocol problems only: 401, 404 unknown session, 410 expired or evicted session, 413 too large,
422 malformed request, 429/503 overload with `Retry-After` (503 also while the session store is unreachable or
the server is shutting down: retry, another replica may answer). Every response carries `X-Request-ID`.
"""


def create_app(settings: Settings | None = None, core: Core | None = None) -> FastAPI:
    core = core or Core(settings)
    settings = core.settings
    keys = Keys(settings.api_keys, settings.operator_keys)
    mcp = None
    if settings.mcp_enabled:
        from toolserver.mcp_server import McpEndpoint  # the mcp SDK costs import time; only when served

        mcp = McpEndpoint(core, idle_timeout_s=settings.mcp_idle_timeout_s,
                          allowed_hosts=settings.mcp_allowed_hosts or None, keys=keys,
                          shared=settings.mcp_sessions == "shared")

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await core.start()
        try:
            if mcp is None:
                yield
            else:
                async with mcp.run():
                    yield
        finally:
            await core.stop()

    app = FastAPI(title="toolserver", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None)  # served with local assets instead of a CDN's
    add_api_docs(app)
    app.router.route_class = BoundedJSONRoute
    app.state.core = core
    app.state.gate = gate = DrainGate()
    app.state.keys = keys  # the OpenEnv WebSocket checks its handshake's key itself
    if mcp is not None:
        # A plain route (not a Mount) so that `/mcp` itself answers, without a redirect to `/mcp/`.
        app.router.routes.append(Route("/mcp", endpoint=mcp, methods=["GET", "POST", "DELETE"],
                                       include_in_schema=False))
        from toolserver.api.openenv.mcp import OpenEnvMcp

        app.router.routes.append(Route("/openenv/{profile}/mcp", endpoint=OpenEnvMcp(core, mcp),
                                       methods=["GET", "POST", "DELETE"], include_in_schema=False))
    _add_error_handlers(app, core)
    if keys:
        _add_api_key_check(app, keys)
    for module in (sessions, inspection, tools, rewards, documents, operations, verl_tool, openenv, vrag, ors):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes,
                       overrides={"/v1/documents": max(settings.max_request_bytes, settings.doc_max_upload_bytes)})
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    if settings.worker_index is not None and settings.node_trim_after_bytes:  # a node's worker: its heap's share
        app.add_middleware(GiveBackAfterLarge, min_bytes=settings.node_trim_after_bytes)
    app.add_middleware(ProcessTime)
    app.add_middleware(RequestContext, gate=gate, retry_after_s=settings.retry_after_s,  # outermost
                       worker=settings.worker_index)
    return app


def _error_response(exc: ServiceError) -> JSONResponse:
    headers = {}
    if hasattr(exc, "retry_after_s"):
        headers["Retry-After"] = str(exc.retry_after_s)
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(error_body(exc), status_code=exc.status, headers=headers)


# The codes of the answers Starlette's router gives itself (no route, a route without that method).
HTTP_CODES = {400: "bad_request", 404: "route_not_found", 405: "method_not_allowed"}


def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own HTTP errors in the service's shape: `{"detail", "code"}`, its headers (`Allow`) kept."""
    detail = exc.detail
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"no route {request.url.path}; the API's routes are listed at /docs"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Every documented route of this path (Starlette's own answer names the first one's methods only).
        methods = {m.upper() for template, ops in request.app.openapi().get("paths", {}).items()
                   if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), request.url.path)
                   for m in ops}
        headers["Allow"] = allowed = ", ".join(sorted(methods)) or headers.get("Allow", "")
        detail = f"{request.method} is not allowed on {request.url.path}" + (f"; allowed: {allowed}" if allowed else "")
    code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    return JSONResponse({"detail": str(detail), "code": code}, status_code=exc.status_code, headers=headers)


def _add_error_handlers(app: FastAPI, core: Core) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _http_error(request, exc)

    @app.exception_handler(ServiceError)
    async def _on_error(_request: Request, exc: ServiceError) -> JSONResponse:
        if exc.status == 429:
            core.metrics.overloaded.inc()
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _on_invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # The service's error shape for every 422, FastAPI's own list kept under `errors`.
        errors = jsonable_encoder(exc.errors())
        where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in errors)
        return JSONResponse({"detail": where or "invalid request", "code": "invalid_request", "errors": errors},
                            status_code=422)

    @app.exception_handler(Exception)
    async def _on_bug(_request: Request, _exc: Exception) -> JSONResponse:
        return JSONResponse(internal_error_body(), status_code=500)  # logged by RequestContext, with the id


def _add_api_key_check(app: FastAPI, keys: Keys) -> None:
    @app.middleware("http")
    async def _auth(request: Request, call_next):
        if request.url.path not in OPEN_PATHS:
            # ORS clients (`openreward`) send their key as `X-API-Key`
            authorization = request.headers.get("authorization") or "Bearer " + request.headers.get("x-api-key", "")
            accepted, owner = keys.identify(authorization)
            if not accepted:
                return _error_response(Unauthorized("missing or invalid API key"))
            caller.set(owner)  # the sessions this request may see (copied into the endpoint's context)
        return await call_next(request)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with what FastAPI cannot see: the models of the bodies read by hand (the
    multipart-or-JSON endpoints refer to them), and `/act`'s `format` enum from the call-format registry."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (CreateSessionRequest, AddImagesRequest, IngestPathRequest):
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            for name, definition in model_schema.pop("$defs", {}).items():
                components.setdefault(name, definition)
            components.setdefault(model.__name__, model_schema)
        components["ActRequest"]["properties"]["format"]["enum"] = ["auto", *FORMATS]
        # Every 422 has the service's error shape (`_on_invalid`), FastAPI's list under `errors`.
        components["HTTPValidationError"] = {
            "title": "HTTPValidationError", "type": "object", "required": ["detail", "code"],
            "properties": {"detail": {"type": "string", "title": "Detail"}, "code": {"type": "string", "title": "Code"},
                           "errors": {"type": "array", "title": "Errors",
                                      "items": {"$ref": "#/components/schemas/ValidationError"}}}}
        _document_errors(schema)
        document_openenv(schema)  # its WebSocket messages, which OpenAPI cannot describe as routes
        app.openapi_schema = schema
    return app.openapi_schema


ERROR_SCHEMA = {
    "title": "Error", "type": "object", "required": ["detail", "code"],
    "description": "Every error answer's body: what went wrong, and a stable code to branch on.",
    "properties": {"detail": {"type": "string", "title": "Detail"},
                   "code": {"type": "string", "title": "Code", "description": (
                       "e.g. not_found, session_gone, invalid_request, too_large, overloaded, unauthorized, "
                       "route_not_found, method_not_allowed, internal_error")},
                   "request_id": {"type": "string", "title": "Request Id", "description": "On a 500: quote it."}}}


def _document_errors(schema: dict[str, Any]) -> None:
    """Every operation's 4XX and 5XX answers have the `Error` shape (a status it documents itself keeps its own)."""
    schema["components"]["schemas"]["Error"] = ERROR_SCHEMA
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            responses.setdefault("4XX", {"description": "A protocol error (`code` says which)", **ref})
            responses.setdefault("5XX", {"description": "Unavailable, overloaded, or a bug (`code` says which)", **ref})
