"""The API's interactive documentation, `/docs` (Swagger UI) and `/redoc` (ReDoc), with every script, style sheet
and icon served by the server itself from the `fastapi-offline` package (MIT; it ships Swagger UI's and ReDoc's
own builds under their licences): the pages work on an air-gapped node, where FastAPI's defaults load them from a
CDN and stay blank."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

ASSETS_PREFIX = "/docs/assets"
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "redoc.standalone.js": "text/javascript", "favicon.png": "image/png"}
# Paths that answer without an API key, like /docs itself.
OPEN_DOC_PATHS = {"/docs", "/docs/oauth2-redirect", "/redoc", *(f"{ASSETS_PREFIX}/{name}" for name in ASSETS)}


def _asset_dir() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def add_api_docs(app: FastAPI) -> None:
    """Routes for the two pages and their assets on an app made with `docs_url=None, redoc_url=None`."""
    directory = _asset_dir()

    def url(request: Request, path: str) -> str:
        return f"{request.scope.get('root_path', '')}{path}"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=url(request, "/openapi.json"), title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=url(request, "/docs/oauth2-redirect"),
            swagger_js_url=url(request, f"{ASSETS_PREFIX}/swagger-ui-bundle.js"),
            swagger_css_url=url(request, f"{ASSETS_PREFIX}/swagger-ui.css"),
            swagger_favicon_url=url(request, f"{ASSETS_PREFIX}/favicon.png"))

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(openapi_url=url(request, "/openapi.json"), title=f"{app.title} - ReDoc",
                              redoc_js_url=url(request, f"{ASSETS_PREFIX}/redoc.standalone.js"),
                              redoc_favicon_url=url(request, f"{ASSETS_PREFIX}/favicon.png"),
                              with_google_fonts=False)

    @app.get(ASSETS_PREFIX + "/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise HTTPException(404, "no such documentation asset")
        return FileResponse(directory / name, media_type=ASSETS[name],
                            headers={"Cache-Control": "public, max-age=86400"})
