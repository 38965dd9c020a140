"""Sessions over HTTP (in-process app): lifecycle, image sources, bad inputs, isolation, expiry, eviction, 429."""

import asyncio
import base64
import io
import threading
import time

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS, b64, gradient, photo, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings


@pytest.fixture
def settings(settings_any_store: Settings) -> Settings:
    return settings_any_store  # every test here runs with the in-memory and with the Redis session store


def create(client, **body):
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def test_create_with_base64_and_data_uri_and_inspect(client):
    png = png_bytes(gradient(37, 900))
    body = create(client, images=[{"data": b64(png)}, {"data": "data:image/png;base64," + b64(png)}],
                  texts={"text_0": "hello", "resp_1": "world"})
    assert [i["key"] for i in body["images"]] == ["original_image", "original_image_1"]
    assert [i["index"] for i in body["images"]] == [0, 1]
    assert body["texts"] == ["text_0", "resp_1"]
    info = client.get(f"/v1/sessions/{body['session_id']}").json()
    first = info["images"][0]
    assert (first["width"], first["height"]) == (37, 900)
    assert (first["view_width"], first["view_height"]) == (28, 896)  # smart_resize(900, 37)
    assert first["origin"] == "input"
    assert info["texts"] == [{"key": "text_0", "length": 5}, {"key": "resp_1", "length": 5}]
    assert info["settings"]["coords"] == "rel1000"


def test_session_id_is_unguessable(client):
    ids = {create(client)["session_id"] for _ in range(5)}
    assert len(ids) == 5
    assert all(len(i) >= 32 for i in ids)


def test_multipart_upload_and_get_bytes_back(client):
    data = photo("LadyBird.jpg").read_bytes()
    sid = create(client)["session_id"]
    r = client.post(f"/v1/sessions/{sid}/images", files=[("files", ("a.jpg", data, "image/jpeg")),
                                                          ("files", ("b.png", png_bytes(gradient(5, 5)), "image/png"))])
    assert r.status_code == 200, r.text
    assert [i["key"] for i in r.json()["images"]] == ["original_image", "original_image_1"]
    got = client.get(f"/v1/sessions/{sid}/images/original_image")
    assert got.content == data and got.headers["content-type"] == "image/jpeg"
    by_index = client.get(f"/v1/sessions/{sid}/images/1")
    assert Image.open(io.BytesIO(by_index.content)).size == (5, 5)


def test_multipart_create_with_settings(client):
    r = client.post("/v1/sessions", data={"settings": '{"coords": "rel1", "texts": ["x"]}'},
                    files=[("files", ("a.png", png_bytes(gradient(10, 10)), "image/png"))])
    assert r.status_code == 201, r.text
    info = client.get(f"/v1/sessions/{r.json()['session_id']}").json()
    assert info["settings"]["coords"] == "rel1" and info["texts"][0]["key"] == "text_0"


def test_server_path_under_allowed_root_and_outside(client, tmp_path):
    sid = create(client)["session_id"]
    ok = client.post(f"/v1/sessions/{sid}/images", json={"images": [{"path": str(PHOTOS / "Wood.jpg")}]})
    assert ok.status_code == 200 and ok.json()["images"][0]["width"] == 2560
    outside = client.post(f"/v1/sessions/{sid}/images", json={"images": [{"path": "/etc/passwd"}]})
    assert outside.status_code == 403 and "outside the allowed roots" in outside.json()["detail"]
    sneaky = client.post(f"/v1/sessions/{sid}/images",
                         json={"images": [{"path": str(PHOTOS / ".." / ".." / ".." / "etc" / "passwd")}]})
    assert sneaky.status_code == 403
    missing = client.post(f"/v1/sessions/{sid}/images", json={"images": [{"path": str(tmp_path / "nope.png")}]})
    assert missing.status_code == 422 and "no such file" in missing.json()["detail"]


def test_url_disabled_by_default(client):
    sid = create(client)["session_id"]
    r = client.post(f"/v1/sessions/{sid}/images", json={"images": [{"url": "http://example.com/a.png"}]})
    assert r.status_code == 403 and "disabled" in r.json()["detail"]


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/a.png", "http://10.0.0.1/a.png", "http://[::1]/x",
                                 "http://169.254.169.254/latest", "http://localhost/a.png"])
def test_url_to_private_or_loopback_refused(settings, url):
    settings.allow_url_fetch = True
    with TestClient(create_app(settings)) as c:
        sid = create(c)["session_id"]
        r = c.post(f"/v1/sessions/{sid}/images", json={"images": [{"url": url}]})
        assert r.status_code == 403, r.text
        assert "private or local" in r.json()["detail"]


def test_url_fetch_when_enabled(settings, live_server):
    """Fetch an image over real HTTP from a second server process (loopback allowed only by the test setting)."""
    import httpx
    src = httpx.post(live_server.url + "/v1/sessions",
                     json={"images": [{"data": b64(png_bytes(gradient(33, 44)))}]}).json()
    url = f"{live_server.url}/v1/sessions/{src['session_id']}/images/original_image"
    settings.allow_url_fetch = True
    settings.url_allow_private = True
    with TestClient(create_app(settings)) as c:
        body = create(c, images=[{"url": url}])
        assert (body["images"][0]["width"], body["images"][0]["height"]) == (33, 44)
        missing = c.post(f"/v1/sessions/{body['session_id']}/images", json={"images": [{"url": url + "x"}]})
        assert missing.status_code == 422 and "HTTP 404" in missing.json()["detail"]


@pytest.mark.parametrize(
    ("images", "status", "fragment"),
    [
        ([{"data": b64(b"not an image at all")}], 422, "not an image"),
        ([{"data": "%%%"}], 422, "not valid base64"),
        ([{"data": b64(png_bytes(gradient(50, 50), "JPEG")[:300])}], 422, "truncated"),
        ([{"data": "x", "path": "/y"}], 422, "exactly one"),
        ([{}], 422, "exactly one"),
    ],
)
def test_bad_images_give_clear_errors(client, images, status, fragment):
    r = client.post("/v1/sessions", json={"images": images})
    assert r.status_code == status, r.text
    assert fragment in r.json()["detail"]


def test_oversized_and_bomb_uploads_413(settings):
    from tests.test_intake import _bomb_png
    settings.max_image_bytes = 10_000
    settings.max_request_bytes = 200_000
    with TestClient(create_app(settings)) as c:
        big = png_bytes(Image.effect_noise((200, 200), 50).convert("RGB"))
        assert len(big) > 10_000
        r = c.post("/v1/sessions", json={"images": [{"data": b64(big)}]})
        assert r.status_code == 413 and "limit" in r.json()["detail"]
        r = c.post("/v1/sessions", json={"images": [{"data": b64(_bomb_png(50_000, 50_000))}]})
        assert r.status_code == 413 and "refused before decoding" in r.json()["detail"]
        r = c.post("/v1/sessions", content=b"{" + b" " * 300_000 + b"}", headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["code"] == "too_large"
        sid = create(c)["session_id"]
        r = c.post(f"/v1/sessions/{sid}/images", files=[("files", ("x.bin", b"0" * 250_000, "image/png"))])
        assert r.status_code == 413


def test_failed_create_leaves_no_session(client):
    good = b64(png_bytes(gradient(8, 8)))
    before = client.get("/readyz").json()["sessions"]
    r = client.post("/v1/sessions", json={"images": [{"data": good}, {"data": b64(b"junk")}]})
    assert r.status_code == 422
    assert client.get("/readyz").json()["sessions"] == before


def test_failed_call_leaves_session_usable(client):
    sid = create(client, images=[{"data": b64(png_bytes(gradient(100, 100)))}])["session_id"]
    bad = client.post(f"/v1/sessions/{sid}/images", json={"images": [{"data": b64(b"junk")}]})
    assert bad.status_code == 422
    bad_tool = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [5, 5, 1, 1]})
    assert bad_tool.status_code == 200 and bad_tool.json()["ok"] is False
    good = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
    assert good.json()["ok"] is True
    assert good.json()["images"][0]["key"] == "observation_1"  # the failure consumed no key


def test_duplicate_and_custom_keys(client):
    png = b64(png_bytes(gradient(8, 8)))
    body = create(client, images=[{"data": png, "key": "chart"}, {"data": png}])
    assert [i["key"] for i in body["images"]] == ["chart", "original_image"]
    r = client.post(f"/v1/sessions/{body['session_id']}/images", json={"images": [{"data": png, "key": "chart"}]})
    assert r.status_code == 422 and "already exists" in r.json()["detail"]
    r = client.post("/v1/sessions", json={"images": [{"data": png, "key": "../etc"}]})
    assert r.status_code == 422


def test_texts_auto_names(client):
    sid = create(client)["session_id"]
    assert client.post(f"/v1/sessions/{sid}/texts", json={"texts": ["a", "b"]}).json()["texts"] == ["text_0", "text_1"]
    assert client.post(f"/v1/sessions/{sid}/texts", json={"texts": {"resp_1": "c"}}).json()["texts"] == ["resp_1"]
    assert client.post(f"/v1/sessions/{sid}/texts", json={"texts": ["d"]}).json()["texts"] == ["text_2"]


def test_unknown_session_404_and_release(client):
    assert client.get("/v1/sessions/nope").status_code == 404
    assert client.post("/v1/sessions/nope/tools/zoom_in", json={}).status_code == 404
    sid = create(client)["session_id"]
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert client.get(f"/v1/sessions/{sid}").status_code == 404


def test_unknown_image_key_404(client):
    sid = create(client)["session_id"]
    r = client.get(f"/v1/sessions/{sid}/images/missing")
    assert r.status_code == 404


def test_session_isolation(client):
    a = create(client, images=[{"data": b64(png_bytes(Image.new("RGB", (4, 4), "red")))}])["session_id"]
    b = create(client, images=[{"data": b64(png_bytes(Image.new("RGB", (6, 6), "blue")))}])["session_id"]
    img_a = Image.open(io.BytesIO(client.get(f"/v1/sessions/{a}/images/original_image").content))
    img_b = Image.open(io.BytesIO(client.get(f"/v1/sessions/{b}/images/original_image").content))
    assert img_a.size == (4, 4) and img_b.size == (6, 6)
    zoom_b = client.post(f"/v1/sessions/{b}/tools/zoom_in", json={"image": "original_image",
                                                                   "bbox_2d": [0, 0, 1000, 1000]}).json()
    assert zoom_b["ok"]
    assert client.get(f"/v1/sessions/{a}/images/observation_1").status_code == 404
    assert [i["key"] for i in client.get(f"/v1/sessions/{a}").json()["images"]] == ["original_image"]
    client.delete(f"/v1/sessions/{b}")
    assert client.get(f"/v1/sessions/{a}/images/original_image").status_code == 200


def test_expiry_gives_410(settings):
    with TestClient(create_app(settings)) as c:
        sid = create(c, ttl_s=0.2)["session_id"]
        assert c.get(f"/v1/sessions/{sid}").status_code == 200
        time.sleep(0.3)
        r = c.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 10, 10]})
        assert r.status_code == 410 and "expired" in r.json()["detail"]
        assert c.get(f"/v1/sessions/{sid}").status_code == 410


def test_idle_sessions_expire(settings):
    settings.sweep_interval_s = 0.05
    with TestClient(create_app(settings)) as c:
        sid = create(c, ttl_s=0.1)["session_id"]
        time.sleep(0.4)
        if settings.session_store == "memory":
            assert c.get("/readyz").json()["sessions"] == 0  # the sweeper dropped it (Redis expires keys itself)
        r = c.get(f"/v1/sessions/{sid}")
        assert r.status_code == 410 and "expired" in r.json()["detail"]


def test_lru_eviction_gives_410(memory_settings):
    one = png_bytes(gradient(100, 100))  # ~30 KB of pixels + bytes
    memory_settings.total_max_bytes = 70_000  # room for two sessions, not three
    with TestClient(create_app(memory_settings)) as c:
        first = create(c, images=[{"data": b64(one)}])["session_id"]
        second = create(c, images=[{"data": b64(one)}])["session_id"]
        c.get(f"/v1/sessions/{first}")  # first is now the most recently used
        third = create(c, images=[{"data": b64(one)}])["session_id"]
        r = c.get(f"/v1/sessions/{second}")
        assert r.status_code == 410 and "evicted" in r.json()["detail"]
        assert c.get(f"/v1/sessions/{first}").status_code == 200
        assert c.get(f"/v1/sessions/{third}").status_code == 200
        assert "toolserver_sessions_evicted 1.0" in c.get("/metrics").text


def test_session_byte_budget_413(settings):
    # What counts differs by store (decoded pixels and upload in memory, the stored bytes in Redis), so the
    # budget is set from what one image costs: room for one and a half.
    with TestClient(create_app(settings)) as c:
        held = c.get(f"/v1/sessions/{create(c, images=[{'data': b64(png_bytes(gradient(100, 100)))}])['session_id']}"
                     ).json()["bytes_held"]
    settings.session_max_bytes = held * 3 // 2
    with TestClient(create_app(settings)) as c:
        sid = create(c, images=[{"data": b64(png_bytes(gradient(100, 100)))}])["session_id"]
        r = c.post(f"/v1/sessions/{sid}/images", json={"images": [{"data": b64(png_bytes(gradient(100, 100)))}]})
        assert r.status_code == 413 and "budget" in r.json()["detail"]
        assert len(c.get(f"/v1/sessions/{sid}").json()["images"]) == 1


def test_429_when_the_queue_is_saturated(settings):
    settings.workers = 1
    settings.queue_limit = 1
    app = create_app(settings)
    with TestClient(app) as c:
        sid = create(c, images=[{"data": b64(png_bytes(gradient(64, 64)))}])["session_id"]
        core = app.state.core
        gate = threading.Event()

        async def occupy():
            return await core.pool.run(gate.wait, 10)

        holder = threading.Thread(target=lambda: asyncio.run(occupy()))
        holder.start()
        deadline = time.monotonic() + 5
        while core.pool.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        r = c.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert "capacity" in r.json()["detail"]
        gate.set()
        holder.join()
        ok = c.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
        assert ok.status_code == 200 and ok.json()["ok"]
        assert "toolserver_overloaded_total 1.0" in c.get("/metrics").text


def test_health_ready_metrics(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and "default" in ready["profiles"]
    sid = create(client, images=[{"data": b64(png_bytes(gradient(64, 64)))}])["session_id"]
    client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
    client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 9, "bbox_2d": [0, 0, 500, 500]})
    text = client.get("/metrics").text
    assert 'toolserver_tool_calls_total{outcome="ok",tool="zoom_in"} 1.0' in text
    assert 'toolserver_tool_errors_total{code="unknown_image",tool="zoom_in"} 1.0' in text
    assert 'toolserver_tool_latency_seconds_count{tool="zoom_in"} 2.0' in text
    if ready["session_store"]["kind"] == "memory":
        assert "toolserver_sessions_live 1.0" in text
        assert "toolserver_bytes_held" in text
    else:
        assert ready["session_store"]["kind"] == "redis"
        assert "toolserver_decoded_cache_bytes" in text


def test_api_keys(settings):
    settings.api_keys = ["secret-key-1", "k2"]
    with TestClient(create_app(settings)) as c:
        assert c.get("/healthz").status_code == 200
        r = c.post("/v1/sessions", json={})
        assert r.status_code == 401 and "secret-key-1" not in r.text
        assert c.post("/v1/sessions", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/v1/sessions", json={}, headers={"Authorization": "Bearer k2"}).status_code == 201


def test_image_by_ref_delivery_and_format(client):
    body = create(client, images=[{"data": b64(png_bytes(gradient(300, 200)))}],
                  output={"format": "jpeg", "delivery": "ref"})
    sid = body["session_id"]
    r = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]}).json()
    img = r["images"][0]
    assert img["data"] is None and img["url"].endswith(f"/v1/sessions/{sid}/images/observation_1")
    got = client.get(img["url"])
    assert got.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(got.content)).size == (150, 100)
    png = client.get(img["url"] + "?format=png")
    assert Image.open(io.BytesIO(png.content)).tobytes() == gradient(300, 200).crop((0, 0, 150, 100)).tobytes()


def test_path_delivery_writes_shared_file(client, settings):
    sid = create(client, images=[{"data": b64(png_bytes(gradient(300, 200)))}],
                 output={"delivery": "path"})["session_id"]
    r = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]}).json()
    path = r["images"][0]["path"]
    assert path.startswith(str(settings.resolved_output_dir().resolve()))
    assert Image.open(path).tobytes() == gradient(300, 200).crop((0, 0, 150, 100)).tobytes()
    assert r["images"][0]["data"] is None


def test_inline_png_is_lossless(client):
    src = gradient(300, 200)
    sid = create(client, images=[{"data": b64(png_bytes(src))}])["session_id"]
    r = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [100, 100, 600, 900]}).json()
    img = r["images"][0]
    assert img["mime"] == "image/png"
    out = Image.open(io.BytesIO(base64.b64decode(img["data"])))
    assert out.tobytes() == src.crop(tuple(r["meta"]["box_original"])).tobytes()


def test_tool_timeout_is_a_tool_level_failure_that_changes_nothing(settings):
    settings.tool_timeout_s = 0.001
    with TestClient(create_app(settings)) as c:
        sid = create(c, images=[{"path": str(PHOTOS / "Dragonfly_by_Bolly.jpg")}])["session_id"]
        r = c.post(f"/v1/sessions/{sid}/tools/keypoint_zoom", json={"keypoint": [500, 500]})
        assert r.status_code == 200
        body = r.json()
        assert body["ok"] is False and body["error"]["code"] == "timeout" and "did not finish" in body["text"]
        assert [i["key"] for i in c.get(f"/v1/sessions/{sid}").json()["images"]] == ["original_image"]


def test_the_sweep_gives_freed_memory_back_to_the_system(settings, monkeypatch):
    """Every sweep returns what malloc holds free (`malloc_trim`): a node's worker that had archived released
    sessions held 428 MB idle, 147 MB after one."""
    from toolserver import allocator
    from toolserver.core import facade

    trims = []
    monkeypatch.setattr(facade, "give_back_freed_memory", lambda: trims.append(1) or allocator.give_back_freed_memory())
    settings.sweep_interval_s = 0.05
    with TestClient(create_app(settings)) as c:
        create(c)
        deadline = time.monotonic() + 10
        while len(trims) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(trims) >= 2
    assert isinstance(allocator.give_back_freed_memory(), bool)
