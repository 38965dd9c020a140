"""A node's worker gives its heap's freed pages back after a large request (`middleware.GiveBackAfterLarge`): 16
workers each kept what a burst of verl-tool's 1.75 MB request bodies had freed (docs/node.md, "Memory")."""

from __future__ import annotations

import asyncio
import threading
import time

from fastapi.testclient import TestClient
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.conftest import b64, png_bytes
from toolserver import middleware
from toolserver.api.app import create_app
from toolserver.middleware import GiveBackAfterLarge

MIB = 1 << 20


def _echo_app() -> Starlette:
    async def echo(request: Request) -> Response:
        body = await request.body()
        size = int(request.query_params.get("answer", "0"))
        return Response(body[:16] + b"x" * size)

    return Starlette(routes=[Route("/echo", echo, methods=["POST"])])


def _trims(monkeypatch, gate: threading.Event | None = None) -> list[int]:
    trims: list[int] = []

    def trim() -> bool:
        if gate is not None:
            gate.wait(5)
        trims.append(threading.get_ident())
        return True

    monkeypatch.setattr(middleware, "give_back_freed_memory", trim)
    return trims


def test_a_trim_follows_a_large_body_or_answer_and_nothing_else(monkeypatch):
    trims = _trims(monkeypatch)
    app = GiveBackAfterLarge(_echo_app(), min_bytes=MIB, interval_s=0)
    with TestClient(app) as c:
        assert c.post("/echo", content=b"a" * 1000).status_code == 200
        assert c.get("/nowhere").status_code == 404
        assert app.trims == 0
        for path, body in (("/echo", b"a" * MIB), ("/echo?answer=1048576", b"small"),  # a large body, answer
                           ("/echo?answer=600000", b"a" * 600_000)):  # and the two together
            assert c.post(path, content=body).status_code == 200
            _settle(app)
    assert app.trims == 3
    assert len(trims) == 3 and threading.get_ident() not in trims  # in a thread, off the event loop


def _settle(app: GiveBackAfterLarge) -> None:
    deadline = time.monotonic() + 5
    while (app._trimming is not None or app._timer is not None) and time.monotonic() < deadline:
        time.sleep(0.01)


def _scope() -> dict:
    return {"type": "http", "method": "POST", "path": "/echo", "query_string": b"", "headers": [], "scheme": "http",
            "server": ("t", 80), "root_path": ""}


async def _large_request(app: GiveBackAfterLarge) -> None:
    sent: list[dict] = []
    body = iter([{"type": "http.request", "body": b"a" * MIB, "more_body": False}])

    async def receive() -> dict:
        return next(body, {"type": "http.disconnect"})

    async def send(message: dict) -> None:
        sent.append(message)

    await app(_scope(), receive, send)
    assert sent[0]["status"] == 200


def test_one_trim_at_a_time_and_one_more_for_the_requests_that_ended_meanwhile(monkeypatch):
    gate = threading.Event()
    trims = _trims(monkeypatch, gate)
    app = GiveBackAfterLarge(_echo_app(), min_bytes=MIB, interval_s=0)

    async def scenario() -> None:
        async def one() -> None:
            await _large_request(app)

        await one()  # starts a trim, held by the gate
        await asyncio.gather(one(), one(), one())  # end while it runs: one more trim after it, not three
        assert app.trims == 1
        gate.set()
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(trims) == 2 and app._trimming is None:
                break

    asyncio.run(scenario())
    assert app.trims == 2 and len(trims) == 2


def test_at_most_one_trim_an_interval_and_one_after_the_last_large_request(monkeypatch):
    """A burst trims once at its start and once `interval_s` after that trim, however many of its requests end."""
    trims = _trims(monkeypatch)
    app = GiveBackAfterLarge(_echo_app(), min_bytes=MIB, interval_s=0.3)
    times: list[float] = []
    monkeypatch.setattr(app, "_trimmed", lambda future, done=app._trimmed: (times.append(time.monotonic()),
                                                                             done(future)))

    async def scenario() -> None:
        for _ in range(6):
            await _large_request(app)
            await asyncio.sleep(0.02)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if app._trimming is None and app._timer is None:
                break

    asyncio.run(scenario())
    assert app.trims == 2 and len(trims) == 2
    assert times[1] - times[0] >= 0.3


def test_only_a_node_s_workers_trim_after_large_requests(settings, monkeypatch):
    trims = _trims(monkeypatch)
    big = {"images": [{"data": "data:image/png;base64," + "A" * (2 * MIB)}]}  # refused (not an image), but large
    for update, expected in (({}, 0), ({"worker_index": 0, "node_trim_after_bytes": 0}, 0),
                             ({"worker_index": 0}, 1)):
        trims.clear()
        with TestClient(create_app(settings.model_copy(update=update))) as c:
            small = {"images": [{"data": b64(png_bytes(Image.new("RGB", (8, 8))))}]}
            assert c.post("/v1/sessions", json=small).status_code == 201
            assert c.post("/v1/sessions", json=big).status_code == 422
            for _ in range(100):
                if len(trims) >= expected:
                    break
                threading.Event().wait(0.02)
        assert len(trims) == expected, update
