"""HTTP adapter (FastAPI): a thin layer over `toolserver.core.Core`.

Protocol problems are HTTP errors (`{"detail", "code"}` bodies); tool-level failures are 200 with
`ok:false` in the ToolResult, so an RL loop can feed them back to the model.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, FastAPI, Query, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.datastructures import UploadFile
from starlette.routing import Route

from toolserver import __version__, jsonio
from toolserver.config import Settings
from toolserver.core import Core, RawImage
from toolserver.documents.sources import FILENAME_PATTERN
from toolserver.errors import BadRequest, Forbidden, NotFound, ToolServerError, Unauthorized
from toolserver.geometry import Coords
from toolserver.middleware import BodyLimit, DrainGate, ProcessTime, RequestContext, internal_error_body
from toolserver.models import (
    ActRequest,
    ActResponse,
    AddedImages,
    AddedTexts,
    AddImagesRequest,
    AddTextsRequest,
    CreateSessionRequest,
    DocumentInfo,
    ImageInput,
    IngestPathRequest,
    SessionCreated,
    SessionInfo,
    SessionList,
    ToolCallsRequest,
    ToolCallsResponse,
    ToolResult,
    Trajectory,
    ValidateRequest,
    ValidateResponse,
)
from toolserver.profiles import PROFILES

# The inspector: a static page, its script and its style, served as they are (no build step, nothing fetched
# from outside). The page asks for an API key itself, so these files are open; every call it makes is not.
UI_DIR = Path(__file__).resolve().parent / "ui"
UI_FILES = {"app.js": "text/javascript", "app.css": "text/css"}


# Nothing but this server's own files, scripts and images (thumbnails arrive as blob: URLs).
_UI_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; "
                                          "base-uri 'none'; frame-ancestors 'none'", "Cache-Control": "no-cache"}


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

OPEN_PATHS = {"/healthz", "/readyz", "/docs", "/openapi.json", "/redoc", "/ui", *(f"/ui/{f}" for f in UI_FILES)}

DESCRIPTION = """
Tools for vision-language models that think with images: zoom into a box, look back at an earlier
image, and more, served per session over an indexed memory map of images and texts.

Upload an image once (`POST /v1/sessions`), then call tools by key or index. Tool-level failures
(a bad box, an unknown image) come back as `ok:false` with text the model can read; HTTP errors are
for protocol problems only: 401, 404 unknown session, 410 expired or evicted session, 413 too large,
422 malformed request, 429/503 overload with `Retry-After` (503 also while the session store is unreachable or
the server is shutting down: retry, another replica may answer). Every response carries `X-Request-ID`.
"""


def _error_body(exc: ToolServerError) -> dict[str, str]:
    return {"detail": exc.message, "code": exc.code}


class _BoundedJSONRequest(Request):
    """FastAPI parses declared bodies with `request.json()`: ours limits nesting (jsonio), so a body nested
    100,000 deep is a 422 like any malformed JSON instead of a RecursionError."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = jsonio.loads(await self.body())
        return self._json


class _BoundedJSONRoute(APIRoute):
    def get_route_handler(self):
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            return await handler(_BoundedJSONRequest(request.scope, request.receive))

        return bounded


def _json(model: BaseModel, status_code: int = 200) -> Response:
    # pydantic's serializer is much faster than FastAPI's generic encoder on multi-megabyte base64 strings.
    return Response(jsonio.dump_model(model), status_code=status_code, media_type="application/json")


class _VideoSampling(BaseModel):
    """The multipart fields that say how video files among the uploads are sampled."""

    model_config = ConfigDict(extra="ignore")
    frames_per_second: float | None = ImageInput.model_fields["frames_per_second"]
    max_frames: int | None = ImageInput.model_fields["max_frames"]


async def _form_images(request: Request) -> tuple[list[RawImage], dict[str, str]]:
    """multipart: image or video files under `files` (or `file`), other fields as strings; a video is sampled
    as the `frames_per_second` and `max_frames` fields say."""
    form = await request.form(max_files=10_000, max_fields=1_000, max_part_size=16 * 1024 * 1024)
    files, fields = [], {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name not in ("files", "file"):
                raise BadRequest(f"unexpected file field {name!r}; send images and videos as 'files'")
            files.append(await value.read())
        elif name in ("files", "file"):
            raise BadRequest(f"the multipart field {name!r} must be a file upload (with a filename)")
        else:
            fields[name] = value
    sampling = _validate(_VideoSampling, {k: v for k, v in fields.items() if k in _VideoSampling.model_fields})
    return [RawImage(data, None, sampling.frames_per_second, sampling.max_frames) for data in files], fields


def _is_multipart(request: Request) -> bool:
    return request.headers.get("content-type", "").startswith("multipart/form-data")


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    return _parse_json(raw, "request body")


def _parse_json(raw: str | bytes, what: str) -> Any:
    try:
        return jsonio.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}", code="invalid_json") from None


def _validate(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                            for e in exc.errors(include_url=False))
        raise BadRequest(f"invalid request: {details}") from None


def _multipart_or_json(schema_ref: str) -> dict[str, Any]:
    return {"requestBody": {"content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "files": {"type": "array", "items": {"type": "string", "format": "binary"},
                      "description": "Images, and videos (MP4/MOV, WebM, MKV) taken in as frames."},
            "settings": {"type": "string", "description": "Session settings as JSON (create only)."},
            "frames_per_second": {"type": "number", "exclusiveMinimum": 0, "maximum": 120,
                                  "description": "Videos: frames taken per second (default 2)."},
            "max_frames": {"type": "integer", "minimum": 1,
                           "description": "Videos: the most frames to take (default 32)."},
        }}},
    }, "required": False}}


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def create_app(settings: Settings | None = None, core: Core | None = None) -> FastAPI:
    core = core or Core(settings)
    settings = core.settings

    mcp = None
    if settings.mcp_enabled:
        from toolserver.mcp_server import McpEndpoint  # the mcp SDK costs import time; only when served

        mcp = McpEndpoint(core, idle_timeout_s=settings.mcp_idle_timeout_s,
                          allowed_hosts=settings.mcp_allowed_hosts or None)

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

    app = FastAPI(title="toolserver", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.router.route_class = _BoundedJSONRoute
    app.state.core = core
    app.state.gate = gate = DrainGate()
    if mcp is not None:
        # A plain route (not a Mount) so that `/mcp` itself answers, without a redirect to `/mcp/`.
        app.router.routes.append(Route("/mcp", endpoint=mcp, methods=["GET", "POST", "DELETE"],
                                       include_in_schema=False))

    @app.exception_handler(ToolServerError)
    async def _on_error(_request: Request, exc: ToolServerError) -> JSONResponse:
        headers = {}
        if hasattr(exc, "retry_after_s"):
            headers["Retry-After"] = str(exc.retry_after_s)
            if exc.status == 429:
                core.metrics.overloaded.inc()
        if exc.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return JSONResponse(_error_body(exc), status_code=exc.status, headers=headers)

    @app.exception_handler(Exception)
    async def _on_bug(_request: Request, _exc: Exception) -> JSONResponse:
        return JSONResponse(internal_error_body(), status_code=500)  # logged by RequestContext, with the id

    if settings.api_keys:
        keys = [k.encode() for k in settings.api_keys]

        @app.middleware("http")
        async def _auth(request: Request, call_next):
            if request.url.path not in OPEN_PATHS:
                header = request.headers.get("authorization", "")
                token = header[7:].encode() if header.lower().startswith("bearer ") else b""
                # Compare against every key, always, in constant time per key.
                if not any([hmac.compare_digest(token, k) for k in keys]):
                    return await _on_error(request, Unauthorized("missing or invalid API key"))
            return await call_next(request)

    # -- sessions ---------------------------------------------------------------------------------
    @app.post("/v1/sessions", status_code=201, response_model=SessionCreated, tags=["sessions"],
              openapi_extra=_multipart_or_json("CreateSessionRequest"),
              summary="Create a session with settings and, optionally, images and texts")
    async def create_session(request: Request) -> Response:
        if _is_multipart(request):
            raw, fields = await _form_images(request)
            body = _validate(CreateSessionRequest, _parse_json(fields.get("settings") or "{}", "settings"))
        else:
            raw, body = [], _validate(CreateSessionRequest, await _json_body(request))
        return _json(await core.create_session(body, raw), 201)

    @app.get("/v1/sessions/{session_id}", response_model=SessionInfo, tags=["sessions"],
             summary="The session's memory map and settings")
    async def get_session(session_id: str) -> Response:
        return _json(await core.session_info(session_id))

    @app.delete("/v1/sessions/{session_id}", status_code=204, tags=["sessions"],
                summary="Release everything the session holds")
    async def delete_session(session_id: str) -> Response:
        await core.release(session_id)
        return Response(status_code=204)

    @app.post("/v1/sessions/{session_id}/images", response_model=AddedImages, tags=["sessions"],
              openapi_extra=_multipart_or_json("AddImagesRequest"),
              summary="Add images or a video's frames: multipart upload, base64 / data URI, allowed server path or URL")
    async def add_images(session_id: str, request: Request) -> Response:
        if _is_multipart(request):
            raw, _ = await _form_images(request)
            added = await core.add_images(session_id, raw_images=raw)
        else:
            body = _validate(AddImagesRequest, await _json_body(request))
            added = await core.add_images(session_id, body.images)
        return _json(added)

    @app.get("/v1/sessions/{session_id}/images/{key}", tags=["sessions"],
             responses={200: {"content": {"image/png": {}, "image/jpeg": {}, "image/webp": {}}}},
             summary="An image's bytes (inputs as uploaded; tool images in the session's format)")
    async def get_image(session_id: str, key: str,
                        format: Annotated[str | None, Query(pattern="^(png|jpeg|webp)$")] = None,
                        max_side: Annotated[int | None, Query(ge=1, le=4096, description=(
                            "A JPEG thumbnail no larger than this on its long side (1-4096)"))] = None) -> Response:
        if max_side is not None:
            return Response(await core.thumbnail(session_id, key, max_side), media_type="image/jpeg")
        data, mime = await core.image_bytes(session_id, key, format)
        return Response(data, media_type=mime)

    @app.get("/v1/sessions/{session_id}/trajectory", response_model=Trajectory, tags=["inspection"],
             responses={200: {"content": {"application/x-ndjson": {}}}},
             summary="The session's images and its tool calls in order (`?format=jsonl`: one call per line)")
    async def trajectory(session_id: str,
                         format: Annotated[str, Query(pattern="^(json|jsonl)$")] = "json") -> Response:
        found = await core.trajectory(session_id)
        if format == "jsonl":
            lines = (jsonio.dump_model(call) + b"\n" for call in found.calls)
            return StreamingResponse(lines, media_type="application/x-ndjson")
        return _json(found)

    @app.get("/v1/sessions", response_model=SessionList, tags=["inspection"],
             summary="Live sessions, oldest first, paged (needs an API key, or a server on loopback)")
    async def list_sessions(offset: Annotated[int, Query(ge=0)] = 0,
                            limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Response:
        if not listing_allowed(settings):
            raise Forbidden("listing sessions is off: it would reveal session ids to anyone who can reach this "
                            "server. Configure API keys, or set TOOLSERVER_SESSION_LIST=on", code="listing_disabled")
        return _json(await core.list_sessions(offset, limit))

    @app.post("/v1/sessions/{session_id}/texts", response_model=AddedTexts, tags=["sessions"],
              summary="Add texts (a dict names them; a list gets text_0, text_1, …)")
    async def add_texts(session_id: str, body: AddTextsRequest) -> Response:
        return _json(AddedTexts(texts=await core.add_texts(session_id, body.texts)))

    # -- tools ------------------------------------------------------------------------------------
    @app.get("/v1/tools", tags=["tools"], summary="Tools as OpenAI function-calling entries")
    async def list_tools(profile: str = "default", strict: bool = False,
                         coords: Coords | None = None) -> list[dict[str, Any]]:
        return core.list_tools(profile, strict=strict, coords=coords)

    @app.get("/v1/profiles", tags=["tools"], summary="The profiles and their tools")
    async def list_profiles() -> list[dict[str, Any]]:
        return [{"name": p.name, "description": p.description, "tools": list(p.tools), "aliases": p.aliases,
                 "call_format": p.call_format, "coords": str(p.coords), "max_tool_calls": p.max_tool_calls}
                for p in PROFILES.values()]

    @app.post("/v1/sessions/{session_id}/tools/{name}", response_model=ToolResult, tags=["tools"],
              summary="Execute one tool with a JSON arguments object")
    async def call_tool(session_id: str, name: str, request: Request,
                        arguments: Annotated[dict[str, Any] | None, Body()] = None) -> Response:
        return _json(await core.call_tool(session_id, name, arguments or {}, base_url=_base_url(request)))

    @app.post("/v1/sessions/{session_id}/tool_calls", response_model=ToolCallsResponse, tags=["tools"],
              summary="Execute OpenAI tool_calls; returns the messages to append")
    async def tool_calls(session_id: str, body: ToolCallsRequest, request: Request) -> Response:
        result = await core.execute_tool_calls(session_id, body.tool_calls, body.image_message,
                                               base_url=_base_url(request))
        return _json(result)

    @app.post("/v1/sessions/{session_id}/act", response_model=ActResponse, tags=["tools"],
              summary="Parse raw model output, run the tool calls in it, render the observation")
    async def act(session_id: str, body: ActRequest, request: Request) -> Response:
        return _json(await core.act(session_id, body.text, body.format, base_url=_base_url(request)))

    @app.post("/v1/validate", response_model=ValidateResponse, tags=["validation"],
              summary="Check many texts against the instruction-following validators, without a session")
    async def validate(body: ValidateRequest) -> Response:
        """For reward computation: each item is `{"tool", "params", "text"}`; results come back in the same
        order, `{"ok": true, "result": bool, "text": "Check result: …"}` or `{"ok": false, "error": {...}}`
        for an item whose validator, parameters or text is unusable (the rest of the batch still runs)."""
        return _json(await core.validate(body.items))

    # -- documents --------------------------------------------------------------------------------
    @app.post("/v1/documents", status_code=202, response_model=DocumentInfo, tags=["documents"],
              summary="Ingest a document: a PDF upload, or a server path (PDF or page-image folder)",
              responses={200: {"model": DocumentInfo, "description": "Ingested (with `wait=true`)"},
                         409: {"description": "The document is being ingested already"}},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
                      "file": {"type": "string", "format": "binary", "description": "The PDF."},
                      "filename": {"type": "string", "pattern": FILENAME_PATTERN,
                                   "description": "Document id (default: the file's stem)."},
                  }}},
                  "application/json": {"schema": {"$ref": "#/components/schemas/IngestPathRequest"}}}}})
    async def ingest_document(request: Request, wait: bool = False) -> Response:
        """The document is checked at once (a corrupt or encrypted PDF is a 422 and changes nothing), then
        rendered and embedded in the background, one document at a time: poll `GET /v1/documents/{filename}`
        for `pages_done`, or pass `wait=true` to answer when it is done. Ingesting an unchanged document
        again does nothing (`unchanged: true`); a changed one is replaced; a `partial` one is resumed."""
        if _is_multipart(request):
            form = await request.form(max_files=1, max_fields=10)
            upload = form.get("file")
            if not isinstance(upload, UploadFile):
                raise BadRequest("send the PDF as the multipart file field 'file'")
            filename = form.get("filename")
            info = await core.ingest_document(data=await upload.read(), upload_name=upload.filename or "document.pdf",
                                              filename=filename if isinstance(filename, str) and filename else None,
                                              wait=wait)
        else:
            body = _validate(IngestPathRequest, await _json_body(request))
            info = await core.ingest_document(path=body.path, filename=body.filename, wait=wait)
        return _json(info, 200 if wait else 202)

    @app.get("/v1/documents", response_model=list[DocumentInfo], tags=["documents"],
             summary="The documents in the library")
    async def list_documents() -> Response:
        docs = core.list_documents()
        return Response(json.dumps([d.model_dump(mode="json") for d in docs]), media_type="application/json")

    @app.get("/v1/documents/{filename}", response_model=DocumentInfo, tags=["documents"],
             summary="One document and where its ingestion stands")
    async def get_document(filename: str) -> Response:
        return _json(await core.document(filename))

    @app.delete("/v1/documents/{filename}", status_code=204, tags=["documents"],
                summary="Delete a document: its pages, texts and embeddings")
    async def delete_document(filename: str) -> Response:
        await core.delete_document(filename)
        return Response(status_code=204)

    # -- operations -------------------------------------------------------------------------------
    @app.get("/ui", include_in_schema=False)
    async def inspector() -> Response:
        return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=_UI_HEADERS)

    @app.get("/ui/{name}", include_in_schema=False)
    async def inspector_file(name: str) -> Response:
        if name not in UI_FILES:
            raise NotFound(f"no file {name!r} in the inspector", code="not_found")
        return FileResponse(UI_DIR / name, media_type=UI_FILES[name], headers=_UI_HEADERS)

    @app.get("/healthz", tags=["operations"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], summary="Readiness, with what this server can serve",
             responses={503: {"description": "Not ready: the session store (Redis) is unreachable, the server is "
                                              "shutting down, or `sr_required` is set and no SMFANet weights are "
                                              "installed"}})
    async def readyz() -> JSONResponse:
        sr = core.sr.status()
        reasons = []
        if settings.sr_required and not sr["available"]:
            reasons.append(core.sr.unavailable_reason())
        if gate.draining:
            reasons.append("the server is shutting down")
        store_problem = await core.store.check()
        if store_problem:
            reasons.append(store_problem)
        store = core.store.stats()
        body = {"status": "not ready" if reasons else "ready", "version": __version__, "profiles": list(PROFILES),
                "sessions": store.get("sessions"), "bytes_held": store.get("bytes_held"), "session_store": store,
                "workers": core.pool.workers, "queue_limit": core.pool.queue_limit, "super_resolution": sr,
                "documents": core.documents.status()}
        if reasons:
            body["reason"] = "; ".join(reasons)
        return JSONResponse(body, status_code=503 if reasons else 200)

    @app.get("/metrics", tags=["operations"], response_class=PlainTextResponse,
             summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(core.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes,
                       overrides={"/v1/documents": max(settings.max_request_bytes, settings.doc_max_upload_bytes)})
    def openapi_with_hand_described_bodies() -> dict[str, Any]:
        # The bodies of the multipart-or-JSON endpoints are read by hand, so FastAPI does not list their
        # models; the `openapi_extra` above refers to them, and they are added here.
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in (CreateSessionRequest, AddImagesRequest, IngestPathRequest):
                model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, definition in model_schema.pop("$defs", {}).items():
                    components.setdefault(name, definition)
                components.setdefault(model.__name__, model_schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi_with_hand_described_bodies  # type: ignore[method-assign]
    app.add_middleware(ProcessTime)
    app.add_middleware(RequestContext, gate=gate, retry_after_s=settings.retry_after_s)  # outermost
    return app

