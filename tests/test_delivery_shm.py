"""`shm` delivery: raw pixels in shared memory, through Core, over HTTP and through the client; its lifetime,
bound and safety; and a bad or expired handle's error."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import stat
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS, b64, gradient, png_bytes, smfanet_dir
from toolserver.api import create_app
from toolserver.client import Client, ShmHandleGone, read_shm, shm_image
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.models import CreateSessionRequest, ImageInput, ShmHandle

ZOOM = {"image": 0, "bbox_2d": [0, 0, 500, 500]}


def shm_settings(tmp_path: Path, **overrides) -> Settings:
    return Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS, tmp_path], workers=2, queue_limit=64,
                    sr_model_dir=tmp_path / "no-weights", shm_delivery=True, shm_dir=tmp_path / "shm",
                    **overrides)


@pytest.fixture
def http(tmp_path: Path):
    with TestClient(create_app(shm_settings(tmp_path))) as c:
        yield c


class Through(httpx.BaseTransport):
    """The client's requests answered by a TestClient's app."""

    def __init__(self, http: TestClient):
        self.http = http

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = self.http.request(request.method, str(request.url), headers=dict(request.headers), content=request.read())
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)


def shm_session(client, image: Image.Image | None = None, **settings) -> str:
    body = {"images": [{"data": b64(png_bytes(image or gradient(64, 48)))}], "output": {"delivery": "shm"},
            **settings}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def png_pixels(client, sid: str, key: str) -> np.ndarray:
    r = client.get(f"/v1/sessions/{sid}/images/{key}", params={"format": "png"})
    assert r.status_code == 200
    return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))


def test_over_http_the_handle_maps_the_very_pixels_the_png_holds(http, tmp_path):
    sid = shm_session(http)
    r = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM).json()
    assert r["ok"], r
    image = r["images"][0]
    assert image["data"] is None and image["url"] is None and image["mime"] == "application/octet-stream"
    handle = ShmHandle.model_validate(image["shm"])
    assert (handle.width, handle.height, handle.mode) == (image["width"], image["height"], "RGB")
    assert handle.nbytes == handle.width * handle.height * 3 and handle.expires_at > time.time() + 500
    path = Path(handle.path)
    assert path.parent.parent == tmp_path / "shm" and path.parent.name == sid
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    pixels = read_shm(handle)
    assert pixels.shape == (handle.height, handle.width, 3) and not pixels.flags.writeable
    assert np.array_equal(pixels, png_pixels(http, sid, image["key"]))
    assert shm_image(handle).tobytes() == pixels.tobytes()


def test_through_core_and_the_client(tmp_path):
    core = Core(shm_settings(tmp_path))

    async def run() -> tuple:
        created = await core.create_session(CreateSessionRequest(
            images=[ImageInput(data=b64(png_bytes(gradient(80, 60))))], output={"delivery": "shm"}))
        result = await core.call_tool(created.session_id, "zoom_in", ZOOM)
        data, _ = await core.image_bytes(created.session_id, result.images[0].key, "png")
        await core.release(created.session_id)
        return result, data

    try:
        result, png = asyncio.run(run())
    finally:
        asyncio.run(core.stop())
    assert result.ok and result.images[0].shm is not None
    with pytest.raises(ShmHandleGone, match="gone before its expiry"):  # released with its session
        read_shm(result.images[0])

    with TestClient(create_app(shm_settings(tmp_path / "b"))) as http, \
            Client("http://testserver", transport=Through(http)) as client:
        session = client.create_session([gradient(80, 60)], output={"delivery": "shm"})
        called = session.call("zoom_in", ZOOM)
        pixels = read_shm(called.images[0], copy=True)
        assert pixels.flags.writeable
        assert np.array_equal(pixels, np.asarray(Image.open(io.BytesIO(png))))
        assert np.array_equal(np.asarray(shm_image(called.images[0])), pixels)
        with pytest.raises(ValueError, match="not delivered by `shm`"):
            read_shm(called.images[0].model_copy(update={"shm": None}))


def test_super_resolution_by_shm_gives_the_pixels_inline_png_gives(tmp_path):
    settings = shm_settings(tmp_path).model_copy(update={"sr_model_dir": smfanet_dir()})
    scene = Image.open(PHOTOS / "TwoWings.jpg").convert("RGB").crop((100, 100, 164, 164))
    call = {"image": 0, "scale": 2}
    with TestClient(create_app(settings)) as http:
        by_shm = http.post(f"/v1/sessions/{shm_session(http, scene)}/tools/super_resolution", json=call).json()
        inline = http.post(f"/v1/sessions/{shm_session(http, scene, output={'delivery': 'inline'})}/tools/"
                           "super_resolution", json=call).json()
        assert by_shm["ok"] and inline["ok"], (by_shm, inline)
        pixels = read_shm(ShmHandle.model_validate(by_shm["images"][0]["shm"]))  # mapped: valid after the stop
    assert pixels.shape == (128, 128, 3)
    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(inline["images"][0]["data"]))))
    assert np.array_equal(pixels, decoded)


def test_off_unless_enabled_and_refused_where_messages_must_carry_images(tmp_path, http):
    with TestClient(create_app(shm_settings(tmp_path / "off").model_copy(update={"shm_delivery": False}))) as off:
        r = off.post("/v1/sessions", json={"output": {"delivery": "shm"}})
        assert r.status_code == 422 and r.json()["code"] == "shm_disabled", r.text
    sid = shm_session(http)
    turn = http.post(f"/v1/sessions/{sid}/act", json={"text": '<tool_call>{"name": "zoom_in", "arguments": '
                                                              '{"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'})
    assert turn.status_code == 422 and turn.json()["code"] == "shm_not_renderable", turn.text
    calls = http.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [{"id": "c1", "type": "function",
                      "function": {"name": "zoom_in", "arguments": '{"image": 0, "bbox_2d": [0, 0, 500, 500]}'}}]})
    assert calls.status_code == 422 and calls.json()["code"] == "shm_not_renderable", calls.text
    assert http.get(f"/v1/sessions/{sid}").json()["tool_calls"] == 0  # nothing ran


def test_files_go_with_release_expiry_and_server_stop(tmp_path):
    settings = shm_settings(tmp_path, shm_ttl_s=1.0)
    with TestClient(create_app(settings)) as http:
        core = http.app.state.core
        # The expiring session's TTL leaves room for a loaded machine (CI builds side environments meanwhile): it
        # must outlive its own call, and its idle time counts from there.
        released, expiring, kept = shm_session(http), shm_session(http, ttl_s=3), shm_session(http)
        handles = {sid: ShmHandle.model_validate(http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM)
                                                 .json()["images"][0]["shm"]) for sid in (released, expiring, kept)}
        assert http.delete(f"/v1/sessions/{released}").status_code == 204
        assert not Path(handles[released].path).parent.exists()
        time.sleep(3.2)
        # The expired session's file, and the kept session's: past the files' TTL.
        assert asyncio.run(core._delivery.sweep_shm()) == 2
        for sid in (expiring, kept):
            with pytest.raises(ShmHandleGone, match="expired at"):
                read_shm(handles[sid])
        fresh = ShmHandle.model_validate(http.post(f"/v1/sessions/{kept}/tools/zoom_in", json=ZOOM)
                                         .json()["images"][0]["shm"])
        assert Path(fresh.path).is_file()
    assert not Path(fresh.path).exists()  # the in-memory store's sessions end with the server, and so do their files


def test_the_bytes_held_are_bounded(tmp_path):
    with TestClient(create_app(shm_settings(tmp_path / "probe"))) as probe:
        sid = shm_session(probe)
        one = ShmHandle.model_validate(probe.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM)
                                       .json()["images"][0]["shm"]).nbytes
    with TestClient(create_app(shm_settings(tmp_path, shm_max_bytes=2 * one + 10))) as http:
        sid = shm_session(http)
        for _ in range(2):
            assert http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM).json()["ok"]
        r = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM)
        assert r.status_code == 507 and r.json()["code"] == "shm_full", r.text
        assert http.get(f"/v1/sessions/{sid}").json()["tool_calls"] == 2  # the refused call recorded nothing
        assert http.delete(f"/v1/sessions/{sid}").status_code == 204  # its files go, and free the room
        assert http.post(f"/v1/sessions/{shm_session(http)}/tools/zoom_in", json=ZOOM).json()["ok"]


def test_a_directory_open_to_others_is_refused(tmp_path):
    (tmp_path / "shm").mkdir(mode=0o755)
    os.chmod(tmp_path / "shm", 0o755)
    with TestClient(create_app(shm_settings(tmp_path))) as http:
        r = http.post(f"/v1/sessions/{shm_session(http)}/tools/zoom_in", json=ZOOM)
        assert r.status_code == 503 and r.json()["code"] == "shm_unavailable", r.text
        assert "mode 0700" in r.json()["detail"]


def test_a_bad_handle_says_what_is_wrong(tmp_path):
    file = tmp_path / "x.pixels"
    file.write_bytes(bytes(10 * 10 * 3))
    good = ShmHandle(path=str(file), width=10, height=10, mode="RGB", nbytes=300, expires_at=time.time() + 60)
    assert read_shm(good).shape == (10, 10, 3)
    with pytest.raises(ShmHandleGone, match="does not match"):
        read_shm(good.model_copy(update={"width": 11}))
    with pytest.raises(ShmHandleGone, match="not the handle's file"):
        read_shm(good.model_copy(update={"width": 5, "nbytes": 150}))
    with pytest.raises(ShmHandleGone, match="unknown pixel mode"):
        read_shm(good.model_copy(update={"mode": "CMYK"}))
    with pytest.raises(ShmHandleGone, match="gone before its expiry"):
        read_shm(good.model_copy(update={"path": str(tmp_path / "missing.pixels")}))


def test_a_retried_call_answers_the_same_handle_and_runs_once(http):
    sid = shm_session(http)
    headers = {"Idempotency-Key": "k-1"}
    first = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM, headers=headers).json()
    again = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM, headers=headers).json()
    assert first["images"][0]["shm"] == again["images"][0]["shm"]
    assert read_shm(ShmHandle.model_validate(again["images"][0]["shm"])).shape[2] == 3
    assert http.get(f"/v1/sessions/{sid}").json()["tool_calls"] == 1


def test_with_redis_any_replica_reads_and_removes_and_a_stop_leaves_live_sessions_files(tmp_path, redis_server):
    settings = shm_settings(tmp_path, session_store="redis", redis_url=redis_server.url)
    with TestClient(create_app(settings)) as one, TestClient(create_app(settings)) as two:
        sid = shm_session(one)
        handle = ShmHandle.model_validate(two.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM)
                                          .json()["images"][0]["shm"])
        assert np.array_equal(read_shm(handle), png_pixels(one, sid, "observation_1"))  # the stored PNG's pixels
        kept = ShmHandle.model_validate(one.post(f"/v1/sessions/{shm_session(one)}/tools/zoom_in", json=ZOOM)
                                        .json()["images"][0]["shm"])
        assert one.delete(f"/v1/sessions/{sid}").status_code == 204  # released through the other replica
        assert not Path(handle.path).exists()
    assert Path(kept.path).is_file()  # its session lives in Redis after both stopped: the sweep or its TTL ends it
