"""Every error answer has the API's shape, `{"detail", "code"}`: the service's own errors, FastAPI's validation,
and what Starlette's router answers itself (no route: 404, a route without that method: 405)."""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import b64, gradient, png_bytes
from toolserver import errors
from toolserver.api import create_app

IMAGE = {"data": b64(png_bytes(gradient(64, 48)))}
ZOOM = {"image": 0, "bbox_2d": [0, 0, 500, 500]}


def coded(response: httpx.Response, status: int) -> str:
    """The answer's `code`, after checking its status and shape."""
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"], body
    assert isinstance(body["code"], str) and body["code"], body
    return body["code"]


def session(client: TestClient, **settings) -> str:
    r = client.post("/v1/sessions", json={"images": [IMAGE], **settings})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def test_every_service_error_has_a_status_and_a_code():
    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    for cls in subclasses(errors.ServiceError):
        assert 400 <= cls.status < 600 and cls.code, cls


def test_the_router_s_own_404_and_405_have_a_code(client):
    assert coded(client.get("/v1/no-such-route"), 404) == "route_not_found"
    assert coded(client.post("/no/such/thing", json={}), 404) == "route_not_found"
    wrong = client.put("/v1/sessions")
    assert coded(wrong, 405) == "method_not_allowed"
    assert wrong.headers["allow"] == "GET, POST"  # every route of the path, not only the first one's
    assert "allowed: GET, POST" in wrong.json()["detail"]
    assert coded(client.get("/v1/sessions/abc/act"), 405) == "method_not_allowed"
    assert coded(client.post("/healthz"), 405) == "method_not_allowed"


def test_each_status_of_the_service_has_a_code(settings):
    settings.max_request_bytes = 200_000
    with TestClient(create_app(settings)) as client:
        sid = session(client)
        assert coded(client.get("/v1/sessions/no-such-session"), 404) == "unknown_session"
        assert coded(client.post("/v1/sessions", json={"ttl_s": "soon"}), 422) == "invalid_request"
        assert coded(client.post("/v1/sessions", json={"profile": "no-such"}), 422) == "unknown_profile"
        assert coded(client.post(f"/v1/sessions/{sid}/tools/zoom_in", content=b"{"), 422)
        assert coded(client.post("/v1/sessions", content=b"x" * 300_000), 413) == "too_large"
        url = f"/v1/sessions/{sid}/tools/zoom_in"
        assert client.post(url, json=ZOOM, headers={"Idempotency-Key": "k"}).status_code == 200
        reused = client.post(url, json={**ZOOM, "bbox_2d": [0, 0, 50, 50]}, headers={"Idempotency-Key": "k"})
        assert coded(reused, 409) == "idempotency_key_reused"
        short = session(client, ttl_s=0.2)
        time.sleep(0.3)
        assert coded(client.get(f"/v1/sessions/{short}"), 410) == "session_gone"


def test_401_403_and_507_have_a_code(settings, tmp_path):
    keyed = settings.model_copy(update={"api_keys": ["k1"], "session_list": "off"})
    with TestClient(create_app(keyed)) as client:
        assert coded(client.get("/v1/sessions/x"), 401) == "unauthorized"
        assert coded(client.get("/v1/no-such-route"), 401) == "unauthorized"  # the key is checked first
        assert coded(client.get("/v1/sessions", headers={"Authorization": "Bearer k1"}), 403) == "listing_disabled"
    full = settings.model_copy(update={"output_dir_max_bytes": 0, "output_dir": tmp_path / "out"})
    with TestClient(create_app(full)) as client:
        sid = session(client, output={"delivery": "path"})
        assert coded(client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM), 507) == "output_dir_full"


def test_429_500_and_503_have_a_code(settings, monkeypatch):
    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        sid = session(client)

        async def broken(*_args, **_kwargs):
            raise RuntimeError("a bug")

        with monkeypatch.context() as patch:
            patch.setattr(app.state.core, "session_info", broken)
            bug = client.get(f"/v1/sessions/{sid}")
        assert coded(bug, 500) == "internal_error" and bug.json()["request_id"] == bug.headers["x-request-id"]
        for raised, status in ((errors.Overloaded("the queue is full", retry_after_s=2), 429),
                               (errors.Unavailable("the session store is unreachable", retry_after_s=2), 503)):
            async def refusing(*_args, exc=raised, **_kwargs):
                raise exc

            with monkeypatch.context() as patch:
                patch.setattr(app.state.core, "session_info", refusing)
                refused = client.get(f"/v1/sessions/{sid}")
            assert coded(refused, status) == raised.code and refused.headers["retry-after"] == "2"
        app.state.gate.close()
        assert coded(client.get(f"/v1/sessions/{sid}"), 503) == "shutting_down"


@pytest.mark.parametrize("status", ["4XX", "5XX"])
def test_openapi_documents_the_error_shape(client, status):
    schema = client.get("/openapi.json").json()
    assert schema["components"]["schemas"]["Error"]["required"] == ["detail", "code"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert status in operation["responses"], (method, path)
