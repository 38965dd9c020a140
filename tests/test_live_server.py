"""A real server process (uvicorn on a free port): start-up, real photos, limits, concurrency. How fast it starts is
measured by bench/bench_startup.py (BENCHMARKS.md), not asserted here."""

import base64
import concurrent.futures
import io

import httpx
import pytest
from PIL import Image

from tests.conftest import PHOTOS, b64, gradient, photo, png_bytes, start_server, stop_server


def test_a_started_server_is_alive_and_ready(live_server):
    assert httpx.get(live_server.url + "/healthz").status_code == 200
    assert httpx.get(live_server.url + "/readyz").json()["status"] == "ready"


def test_real_photo_zoom_over_http(live_server):
    url = live_server.url
    with httpx.Client(base_url=url, timeout=30) as c:
        created = c.post("/v1/sessions", json={"images": [{"path": str(PHOTOS / "Bridge_by_Sander_Klootwijk.jpg")}]})
        assert created.status_code == 201, created.text
        sid = created.json()["session_id"]
        assert created.json()["images"][0]["width"] == 4352
        r = c.post(f"/v1/sessions/{sid}/tools/zoom_in",
                   json={"image": "original_image", "bbox_2d": [100, 200, 300, 400]}).json()
        assert r["ok"], r["text"]
        assert r["meta"]["box_original"] == [435, 489, 1306, 980]
        out = Image.open(io.BytesIO(base64.b64decode(r["images"][0]["data"])))
        original = Image.open(photo("Bridge_by_Sander_Klootwijk.jpg")).convert("RGB")
        assert out.tobytes() == original.crop((435, 489, 1306, 980)).tobytes()
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204


def test_multipart_upload_over_http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=30) as c:
        data = photo("TwoWings.jpg").read_bytes()
        r = c.post("/v1/sessions", files=[("files", ("w.jpg", data, "image/jpeg"))])
        assert r.status_code == 201
        sid = r.json()["session_id"]
        assert c.get(f"/v1/sessions/{sid}/images/original_image").content == data


def test_errors_over_http(live_server):
    with httpx.Client(base_url=live_server.url, timeout=30) as c:
        assert c.get("/v1/sessions/unknown").status_code == 404
        r = c.post("/v1/sessions", json={"images": [{"data": b64(b"GIF89a-broken")}]})
        assert r.status_code == 422
        r = c.post("/v1/sessions", content=b"x" * (129 * 1024 * 1024 + 1),
                   headers={"content-type": "application/json"})
        assert r.status_code == 413
        # The server is still fine afterwards.
        assert c.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(9, 9)))}]}).status_code == 201


def test_concurrent_sessions_do_not_mix(live_server):
    def one(i: int) -> bool:
        with httpx.Client(base_url=live_server.url, timeout=60) as c:
            color = (i * 20 % 256, 255 - i * 20 % 256, 7)
            sid = c.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(Image.new("RGB", (64, 48), color)))}]}
                         ).json()["session_id"]
            r = c.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]}).json()
            img = Image.open(io.BytesIO(base64.b64decode(r["images"][0]["data"])))
            return img.getpixel((0, 0)) == color and img.size == (32, 28)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(16)))


@pytest.mark.slow
def test_api_key_never_logged(tmp_path):
    server = start_server({"TOOLSERVER_API_KEYS": '["super-secret-123"]', "TOOLSERVER_DATA_DIR": str(tmp_path)})
    try:
        assert httpx.post(server.url + "/v1/sessions", json={}).status_code == 401
        bad = httpx.post(server.url + "/v1/sessions", json={}, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and "super-secret" not in bad.text
        ok = httpx.post(server.url + "/v1/sessions", json={}, headers={"Authorization": "Bearer super-secret-123"})
        assert ok.status_code == 201
    finally:
        stop_server(server)
        log = server.proc.stdout.read().decode()
    assert "super-secret-123" not in log
