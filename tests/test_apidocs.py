"""`/docs` and `/redoc` load nothing from another host: every script, style sheet and icon they name is served by
the server itself (an air-gapped node gets working pages), and they answer without an API key."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from toolserver.api import create_app
from toolserver.config import Settings


@pytest.fixture
def keyed(settings: Settings):
    with TestClient(create_app(settings.model_copy(update={"api_keys": ["secret"]}))) as client:
        yield client


def referenced(html: str) -> list[str]:
    return re.findall(r"""(?:src|href|url)\s*[=:(]\s*['"]([^'"]+)['"]""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_documentation_pages_reference_no_external_host(keyed, page):
    response = keyed.get(page)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    assert not re.search(r"https?://", html), re.findall(r"https?://[^\s'\"]+", html)
    assert "//" not in "".join(referenced(html)).replace("://", ""), referenced(html)
    assets = [url for url in referenced(html) if url.startswith("/docs/assets/")]
    assert assets, html
    for url in assets:
        asset = keyed.get(url)
        assert asset.status_code == 200 and len(asset.content) > 1000, url


def test_the_swagger_page_points_at_the_served_openapi_document(keyed):
    html = keyed.get("/docs").text
    assert "'/openapi.json'" in html or '"/openapi.json"' in html
    assert keyed.get("/openapi.json").json()["info"]["title"] == "toolserver"
    assert keyed.get("/docs/oauth2-redirect").status_code == 200


def test_an_unknown_asset_is_404_and_other_paths_still_need_a_key(keyed):
    for path in ("/docs/assets/../../etc/passwd", "/docs/assets/%2e%2e%2fapi%2fapp.py", "/docs/assets/nothing.js"):
        assert keyed.get(path).status_code in (401, 404), path
    authorized = keyed.get("/docs/assets/nothing.js", headers={"Authorization": "Bearer secret"})
    assert authorized.status_code == 404 and authorized.json()["detail"] == "no such documentation asset"
    assert keyed.get("/v1/sessions").status_code == 401
