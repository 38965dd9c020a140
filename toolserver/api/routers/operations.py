"""Operations: liveness, readiness (what this server can serve), Prometheus metrics, and the inspector page."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse

from toolserver.api.bodies import BoundedJSONRoute, core_of
from toolserver.errors import NotFound

router = APIRouter(route_class=BoundedJSONRoute)

# The inspector: a static page, its script and its style, served as they are (no build step, nothing fetched
# from outside). The page asks for an API key itself, so these files are open; every call it makes is not.
UI_DIR = Path(__file__).resolve().parents[2] / "ui"
UI_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
# Nothing but this server's own files, scripts and images (thumbnails arrive as blob: URLs).
_UI_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; "
                                          "base-uri 'none'; frame-ancestors 'none'", "Cache-Control": "no-cache"}


@router.get("/ui", include_in_schema=False)
async def inspector() -> Response:
    return FileResponse(UI_DIR / "index.html", media_type="text/html", headers=_UI_HEADERS)


@router.get("/ui/{name}", include_in_schema=False)
async def inspector_file(name: str) -> Response:
    if name not in UI_FILES:
        raise NotFound(f"no file {name!r} in the inspector", code="not_found")
    return FileResponse(UI_DIR / name, media_type=UI_FILES[name], headers=_UI_HEADERS)


@router.get("/healthz", tags=["operations"], summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", tags=["operations"], summary="Readiness, with what this server can serve",
            responses={503: {"description": "Not ready: the session store (Redis) is unreachable, the server is "
                                             "shutting down, or `sr_required` is set and no SMFANet weights are "
                                             "installed"}})
async def readyz(request: Request) -> JSONResponse:
    report = await core_of(request).readiness(draining=request.app.state.gate.draining)
    return JSONResponse(report.body(), status_code=200 if report.ready else 503)


@router.get("/metrics", tags=["operations"], response_class=PlainTextResponse, summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    return Response(core_of(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
