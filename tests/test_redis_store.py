"""The Redis session store: several replicas share sessions, a replica restart loses nothing, and a Redis
outage is a clear 503 that ends by itself when Redis is back. A real `redis-server` runs beside the tests.

(Every test of test_api_sessions, test_tools_api, test_intake and test_validate_api also runs on this store.)
"""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS, RedisServer, b64, gradient, photo, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.core import Core, RawImage
from toolserver.errors import NotFound, SessionGone, Unavailable
from toolserver.models import CreateSessionRequest
from toolserver.stores.redis import RedisStore
from toolserver.stores.redis_parts import DecodedCache

ZOOM = {"image": "original_image", "bbox_2d": [100, 100, 600, 500]}


def redis_settings(tmp_path: Path, redis: RedisServer, **extra) -> Settings:
    return Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS], workers=2, queue_limit=64,
                    session_store="redis", redis_url=redis.url, **extra)


def replicas(tmp_path: Path, redis: RedisServer, n: int = 2, **extra) -> list[Core]:
    return [Core(redis_settings(tmp_path / f"replica{i}", redis, **extra)) for i in range(n)]


def decoded(result) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(result.images[0].data)))


async def new_session(core: Core, image: bytes | None = None, **settings) -> str:
    data = image if image is not None else photo("LadyBird.jpg").read_bytes()
    created = await core.create_session(CreateSessionRequest(**settings), [RawImage(data)])
    return created.session_id


def test_a_session_made_on_one_replica_is_used_from_another(tmp_path: Path, redis_server: RedisServer):
    async def main():
        a, b = replicas(tmp_path, redis_server)
        sid = await new_session(a, texts={"answer": "Hello world. This is fine."})
        first = await b.call_tool(sid, "zoom_in", ZOOM)
        second = await a.call_tool(sid, "zoom_in", {"image": first.images[0].key, "bbox_2d": [0, 0, 500, 500]})
        back = await b.call_tool(sid, "lookback_reuse", {"image": 0})
        assert [first.images[0].key, second.images[0].key, back.images[0].key] == [
            "observation_1", "observation_2", "observation_3"]
        # The crop of a crop made on the other replica is exactly what one process makes.
        memory = Core(Settings(data_dir=tmp_path / "memory", workers=2))
        mid = await new_session(memory)
        m1 = await memory.call_tool(mid, "zoom_in", ZOOM)
        m2 = await memory.call_tool(mid, "zoom_in", {"image": m1.images[0].key, "bbox_2d": [0, 0, 500, 500]})
        assert decoded(second).tobytes() == decoded(m2).tobytes()
        assert second.text == m2.text
        # Texts stored through one replica are checked by a tool on the other.
        check = await b.call_tool(sid, "check_whether_response_sentence_number_in_range",
                                  {"response": "answer", "lower_bound": 2, "upper_bound": 2})
        assert check.ok and check.text == "Check result: True" and check.meta["text"] == "answer", check.text
        info_a, info_b = await a.session_info(sid), await b.session_info(sid)
        assert info_a.images == info_b.images and info_a.tool_calls == info_b.tool_calls == 4
        assert [t.key for t in info_b.texts] == ["answer"]
        # Input bytes come back as uploaded from either replica; tool images in any format.
        assert (await b.image_bytes(sid, "original_image"))[0] == photo("LadyBird.jpg").read_bytes()
        png, mime = await b.image_bytes(sid, "observation_1")
        assert mime == "image/png" and Image.open(io.BytesIO(png)).size == (first.images[0].width,
                                                                           first.images[0].height)
        jpeg, mime = await a.image_bytes(sid, "observation_3", "jpeg")
        assert mime == "image/jpeg" and Image.open(io.BytesIO(jpeg)).size == Image.open(photo("LadyBird.jpg")).size
        await b.release(sid)
        with pytest.raises(NotFound):
            await a.session_info(sid)
        for core in (a, b, memory):
            await core.stop()

    asyncio.run(main())


def test_concurrent_calls_from_two_replicas_take_turns(tmp_path: Path, redis_server: RedisServer):
    async def main():
        a, b = replicas(tmp_path, redis_server)
        sid = await new_session(a)
        results = await asyncio.gather(*(core.call_tool(sid, "zoom_in", ZOOM) for core in [a, b] * 6))
        assert all(r.ok for r in results)
        keys = sorted(int(r.images[0].key.split("_")[1]) for r in results)
        assert keys == list(range(1, 13))  # one call at a time per session: no key given twice
        info = await b.session_info(sid)
        assert info.tool_calls == 12 and [i.index for i in info.images] == list(range(13))
        for core in (a, b):
            await core.stop()

    asyncio.run(main())


def test_a_replica_restart_loses_no_session(tmp_path: Path, redis_server: RedisServer):
    async def main():
        first = Core(redis_settings(tmp_path / "one", redis_server))
        sid = await new_session(first)
        before = await first.call_tool(sid, "zoom_in", ZOOM)
        await first.stop()
        restarted = Core(redis_settings(tmp_path / "one", redis_server))
        after = await restarted.call_tool(sid, "zoom_in", ZOOM)
        assert after.images[0].key == "observation_2"
        assert decoded(after).tobytes() == decoded(before).tobytes()
        await restarted.stop()

    asyncio.run(main())


def test_redis_down_is_a_clear_503_and_service_resumes_when_it_returns(tmp_path: Path, redis_server: RedisServer):
    settings = redis_settings(tmp_path, redis_server, redis_timeout_s=0.5, retry_after_s=2)
    image = b64(png_bytes(gradient(320, 240)))
    with TestClient(create_app(settings)) as client:
        sid = client.post("/v1/sessions", json={"images": [{"data": image}]}).json()["session_id"]
        assert client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM).json()["ok"]
        redis_server.stop()
        for method, path, body in [("POST", "/v1/sessions", {"images": [{"data": image}]}),
                                   ("POST", f"/v1/sessions/{sid}/tools/zoom_in", ZOOM),
                                   ("GET", f"/v1/sessions/{sid}", None),
                                   ("DELETE", f"/v1/sessions/{sid}", None)]:
            r = client.request(method, path, json=body)
            assert r.status_code == 503, (path, r.text)
            assert r.json() == {"detail": "the session store (Redis) is unreachable; retry shortly",
                                "code": "session_store_unavailable"}
            assert r.headers["retry-after"] == "2"
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "Redis" in ready.json()["reason"]
        assert client.get("/healthz").status_code == 200  # alive: only not ready
        redis_server.start()  # same port, same append-only file
        assert client.get("/readyz").status_code == 200
        r = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json=ZOOM)
        assert r.status_code == 200 and r.json()["images"][0]["key"] == "observation_2"


def test_a_session_whose_keys_redis_evicted_answers_410(tmp_path: Path, redis_server: RedisServer):
    import redis

    async def main():
        core = Core(redis_settings(tmp_path, redis_server))
        sid = await new_session(core)
        redis.Redis.from_url(redis_server.url).delete(f"ts:{{{sid}}}:blobs")  # as maxmemory eviction would
        with pytest.raises(SessionGone, match="evicted"):
            await core.call_tool(sid, "zoom_in", ZOOM)
        with pytest.raises(SessionGone, match="evicted"):
            await core.session_info(sid)
        await core.stop()

    asyncio.run(main())


def test_idle_sessions_expire_in_redis_and_answer_410(tmp_path: Path, redis_server: RedisServer):
    async def main():
        core = Core(redis_settings(tmp_path, redis_server))
        sid = await new_session(core, ttl_s=0.2)
        await core.call_tool(sid, "zoom_in", ZOOM)  # a use restarts the idle timer
        await asyncio.sleep(0.5)
        with pytest.raises(SessionGone, match="expired"):
            await core.session_info(sid)
        with pytest.raises(SessionGone, match="expired"):
            await core.release(sid)  # as in memory: releasing an expired session is 410, not a quiet 204
        with pytest.raises(NotFound):
            await core.session_info("no-such-session")
        await core.stop()

    asyncio.run(main())


def test_images_are_stored_once_encoded_and_decoded_once_per_replica(tmp_path: Path, redis_server: RedisServer):
    import redis

    async def main():
        core = Core(redis_settings(tmp_path, redis_server))
        upload = photo("LadyBird.jpg").read_bytes()
        sid = await new_session(core, upload)
        for _ in range(3):
            assert (await core.call_tool(sid, "zoom_in", ZOOM)).ok
        back = await core.call_tool(sid, "lookback_reuse", {"image": "observation_1"})
        blobs = redis.Redis.from_url(redis_server.url).hgetall(f"ts:{{{sid}}}:blobs")
        # The upload as sent, each new tool image once as PNG; the lookback's image is not stored again.
        assert blobs[b"original_image"] == upload
        assert sorted(blobs) == [b"observation_1", b"observation_2", b"observation_3", b"original_image"]
        store = core.store
        assert isinstance(store, RedisStore)
        assert all(blobs[k].startswith(b"\x89PNG") for k in blobs if k != b"original_image")
        assert back.images[0].key == "observation_4"
        records, _ = await store.call_log(await store.get(sid))  # the call log counts in the budget too
        assert (await core.session_info(sid)).bytes_held == sum(len(v) for v in blobs.values()) + sum(
            len(r) for r in records)
        # Decoded on arrival (or made by the tool) on this replica, so never decoded from Redis here …
        assert store.cache.misses == 0 and store.cache.hits == 4
        other = Core(redis_settings(tmp_path / "other", redis_server))
        await other.call_tool(sid, "zoom_in", ZOOM)
        await other.call_tool(sid, "zoom_in", ZOOM)
        other_store = other.store
        assert isinstance(other_store, RedisStore)
        assert (other_store.cache.misses, other_store.cache.hits) == (1, 1)  # … and once on another replica
        await other.stop()
        await core.stop()

    asyncio.run(main())


def test_the_decoded_cache_is_bounded_by_pixel_bytes():
    cache = DecodedCache(max_bytes=3 * 100 * 100 * 3)
    loads = []

    def loader(n: int):
        def load() -> Image.Image:
            loads.append(n)
            return Image.new("RGB", (100, 100), (n, n, n))
        return load

    for n in range(5):
        cache.get(("s", str(n)), loader(n))
    assert len(cache) == 3 and cache.nbytes == 3 * 30_000
    cache.get(("s", "4"), loader(4))  # still held
    cache.get(("s", "0"), loader(0))  # dropped, loaded again
    assert loads == [0, 1, 2, 3, 4, 0]
    cache.drop_session("s")
    assert len(cache) == 0
    huge = Image.new("RGB", (200, 200))
    assert cache.get(("s", "huge"), lambda: huge) is huge and len(cache) == 0  # larger than the cache: not kept


def test_redis_store_requires_a_reachable_redis_only_when_used(tmp_path: Path):
    async def main():
        core = Core(Settings(data_dir=tmp_path, session_store="redis", redis_url="redis://127.0.0.1:1/0",
                             redis_timeout_s=0.2))
        with pytest.raises(Unavailable) as raised:
            await core.create_session(CreateSessionRequest())
        assert raised.value.status == 503 and raised.value.code == "session_store_unavailable"
        await core.stop()

    asyncio.run(main())
