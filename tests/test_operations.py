"""Running the server for real: API keys, JSON logs with request ids, and the graceful drain on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import PHOTOS, b64, gradient, photo, png_bytes, smfanet_dir, start_server, stop_server
from toolserver.api import create_app
from toolserver.config import Settings

KEY = "tsk-live-5f1d9a0c2b7e4e11"
OTHER_KEY = "tsk-second-key-0042"
WRONG = "tsk-wrong-attempt-77aa"


def log_records(path: Path) -> list[dict]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # every line is one JSON object


@pytest.mark.slow
def test_api_keys_missing_wrong_and_right_and_the_key_is_never_logged(tmp_path: Path):
    log = tmp_path / "server.log"
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path / "data"),
                           "TOOLSERVER_API_KEYS": json.dumps([KEY, OTHER_KEY]), "TOOLSERVER_LOG_FORMAT": "json"},
                          log_path=log, log_level="debug")
    url = server.url
    bodies = []
    try:
        missing = httpx.post(f"{url}/v1/sessions", json={}, headers={"X-Request-ID": "auth-missing"})
        wrong = httpx.post(f"{url}/v1/sessions", json={}, headers={"Authorization": f"Bearer {WRONG}",
                                                                   "X-Request-ID": "auth-wrong"})
        not_bearer = httpx.post(f"{url}/v1/sessions", json={}, headers={"Authorization": f"Basic {KEY}"})
        prefix = httpx.post(f"{url}/v1/sessions", json={}, headers={"Authorization": f"Bearer {KEY[:-1]}"})
        for r in (missing, wrong, not_bearer, prefix):
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert r.json() == {"detail": "missing or invalid API key", "code": "unauthorized"}
            bodies.append(r.text)
        right = httpx.post(f"{url}/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(64, 48)))}]},
                           headers={"Authorization": f"Bearer {KEY}", "X-Request-ID": "auth-right"})
        assert right.status_code == 201
        sid = right.json()["session_id"]
        second = httpx.get(f"{url}/v1/sessions/{sid}", headers={"Authorization": f"bearer {KEY}"})
        assert second.status_code == 200  # the scheme is case-insensitive
        others = httpx.get(f"{url}/v1/sessions/{sid}", headers={"Authorization": f"Bearer {OTHER_KEY}"})
        assert others.status_code == 404  # a session belongs to the key that created it
        bodies += [right.text, second.text]
        mcp = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                         headers={"Authorization": f"Bearer {WRONG}"})
        assert mcp.status_code == 401  # the MCP endpoint is behind the same keys
        assert httpx.get(f"{url}/healthz").status_code == 200 and httpx.get(f"{url}/readyz").status_code == 200
        unknown = httpx.get(f"{url}/v1/sessions/nope", headers={"Authorization": f"Bearer {KEY}"})
        assert unknown.status_code == 404
        bodies.append(unknown.text)
    finally:
        stop_server(server)
    text = log.read_text()
    for secret in (KEY, OTHER_KEY, WRONG, KEY[:-1]):
        assert secret not in text
        assert all(secret not in body for body in bodies)
    records = log_records(log)
    access = {r["request_id"]: r for r in records if r["logger"] == "toolserver.access"}
    assert access["auth-missing"]["status"] == 401 and access["auth-wrong"]["status"] == 401
    assert access["auth-right"] | {"duration_ms": 0, "time": ""} == {
        "time": "", "level": "INFO", "logger": "toolserver.access", "message": "request",
        "request_id": "auth-right", "method": "POST", "path": "/v1/sessions", "status": 201, "duration_ms": 0,
        "client": "127.0.0.1"}


def test_request_ids_are_echoed_or_made(client):
    r = client.get("/v1/profiles", headers={"X-Request-ID": "trainer-7.step-12:rollout-3"})
    assert r.headers["x-request-id"] == "trainer-7.step-12:rollout-3"
    made = client.get("/v1/profiles", headers={"X-Request-ID": "no spaces or\nnewlines allowed"})
    assert len(made.headers["x-request-id"]) == 32 and made.headers["x-request-id"].isalnum()
    assert client.get("/v1/profiles").headers["x-request-id"] != made.headers["x-request-id"]
    assert client.get("/v1/sessions/nope").headers["x-request-id"]  # errors carry one too


def test_a_draining_app_refuses_new_work_but_stays_alive(settings: Settings):
    with TestClient(create_app(settings)) as c:
        c.app.state.gate.close()
        r = c.post("/v1/sessions", json={})
        assert r.status_code == 503 and r.json()["code"] == "shutting_down"
        assert r.headers["retry-after"] == "1" and r.headers["connection"] == "close"
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 503  # readiness says so, for the load balancer


@pytest.mark.slow
def test_sigterm_lets_calls_in_flight_finish_and_refuses_new_ones(tmp_path: Path):
    log = tmp_path / "server.log"
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path / "data"), "TOOLSERVER_SR_MODEL_DIR": str(smfanet_dir()),
                           "TOOLSERVER_ALLOWED_ROOTS": json.dumps([str(PHOTOS)]), "TOOLSERVER_SHUTDOWN_GRACE_S": "60",
                           "TOOLSERVER_LOG_FORMAT": "json"}, log_path=log, log_level="info")
    url = server.url
    created = httpx.post(f"{url}/v1/sessions", json={"images": [{"path": str(photo("LadyBird.jpg"))}]}, timeout=30)
    sid = created.json()["session_id"]
    slow: dict = {}

    def long_call() -> None:  # SMFANet ×4 of a 480×360 region: seconds on this CPU
        slow["response"] = httpx.post(f"{url}/v1/sessions/{sid}/tools/super_resolution",
                                      json={"image": 0, "bbox_2d": [100, 100, 600, 600], "scale": 4}, timeout=120)

    caller = threading.Thread(target=long_call)
    caller.start()
    deadline = time.monotonic() + 20
    while "toolserver_pool_in_flight 1.0" not in httpx.get(f"{url}/metrics").text:
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.02)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        refused = httpx.post(f"{url}/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
        assert refused.status_code == 503 and refused.json()["code"] == "shutting_down", refused.text
        assert httpx.get(f"{url}/readyz").status_code == 503
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert server.proc.poll() is None  # still serving the call in flight
    finally:
        caller.join(120)
    response = slow["response"]
    assert response.status_code == 200 and response.json()["ok"], response.text
    assert response.json()["images"][0]["width"] > 1000
    server.proc.wait(30)
    records = log_records(log)
    drained = next(r for r in records if r["message"] == "drained")
    assert drained["in_flight"] == 0 and drained["waited_s"] < 60


@pytest.mark.slow
def test_sigusr1_logs_what_every_task_waits_on(tmp_path: Path):
    log = tmp_path / "server.log"
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path / "data"), "TOOLSERVER_LOG_FORMAT": "json"},
                          log_path=log)
    try:
        server.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not any(r["message"].startswith("task ") for r in log_records(log)):
            assert time.monotonic() < deadline, "no task was logged"
            time.sleep(0.05)
        assert httpx.get(f"{server.url}/healthz").status_code == 200  # still serving
    finally:
        stop_server(server)
    waits = [r["message"] for r in log_records(log) if r["message"].startswith("task ")]
    assert any("Server.main_loop" in line for line in waits)  # uvicorn's loop, awaiting its next tick
    assert any("_sweep_forever" in line for line in waits)  # the session sweep


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_log_format_setting(tmp_path: Path, fmt: str):
    log = tmp_path / "server.log"
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path), "TOOLSERVER_LOG_FORMAT": fmt},
                          log_path=log, log_level="info")
    httpx.get(f"{server.url}/v1/profiles", headers={"X-Request-ID": "fmt-check"})
    stop_server(server)
    lines = [line for line in log.read_text().splitlines() if "fmt-check" in line]
    assert len(lines) == 1
    if fmt == "json":
        assert json.loads(lines[0])["path"] == "/v1/profiles"
    else:  # the access line's fields, in text (tests/test_text_logs.py)
        assert re.search(r"\[fmt-check\] GET /v1/profiles 200 \d+(\.\d+)? ms client=127\.0\.0\.1$", lines[0]), lines


def test_a_bug_is_a_500_with_the_request_id_to_quote(settings: Settings, monkeypatch: pytest.MonkeyPatch):
    app = create_app(settings)

    async def broken(items):
        raise RuntimeError("a bug")

    monkeypatch.setattr(app.state.core, "validate", broken)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/v1/validate", json={"items": []}, headers={"X-Request-ID": "bug-1"})
        assert r.status_code == 500
        assert r.json() == {"detail": "internal server error", "code": "internal_error", "request_id": "bug-1"}
        assert r.headers["x-request-id"] == "bug-1"
        assert c.get("/healthz").status_code == 200  # and the server goes on
