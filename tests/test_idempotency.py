"""Exactly-once tool calls: a call carries an idempotency key (`Idempotency-Key`, an OpenAI tool-call id, an
`/act` turn's key); a retry with the same key returns the recorded result, byte for byte, instead of running the
tool again. On both stores; the Redis store's fence and its unknown outcomes too."""

from __future__ import annotations

import asyncio
import base64

import httpx
import pytest
import redis as redis_lib
from fastapi.testclient import TestClient

from tests.conftest import b64, gradient, png_bytes
from tests.test_client import scripted
from toolserver.api import create_app
from toolserver.client import Client, ToolServerError, ToolServerTimeout
from toolserver.client.sync import Session
from toolserver.config import Settings
from toolserver.core import Core, RawImage
from toolserver.errors import Unavailable
from toolserver.memorymap import CallCommit
from toolserver.models import CreateSessionRequest, SessionCreated

ZOOM = {"image": "original_image", "bbox_2d": [10, 10, 200, 150]}


def session(client: TestClient, **settings) -> str:
    body = {"images": [{"data": b64(png_bytes(gradient(320, 240)))}], **settings}
    return client.post("/v1/sessions", json=body).json()["session_id"]


def test_a_retried_call_returns_its_recorded_result_and_runs_once(settings_any_store: Settings):
    with TestClient(create_app(settings_any_store)) as client:
        sid = session(client)
        url = f"/v1/sessions/{sid}/tools/zoom_in"
        first = client.post(url, json=ZOOM, headers={"Idempotency-Key": "k1"})
        again = client.post(url, json=ZOOM, headers={"Idempotency-Key": "k1"})
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json() and first.json()["images"][0]["key"] == "observation_1"
        # msgpack on the retry: the same bytes, unencoded
        packed = client.post(url, json=ZOOM, headers={"Idempotency-Key": "k1", "Accept": "application/msgpack"})
        assert packed.headers["content-type"].startswith("application/msgpack")
        other = client.post(url, json=ZOOM, headers={"Idempotency-Key": "k2"})
        assert other.json()["images"][0]["key"] == "observation_2"
        info = client.get(f"/v1/sessions/{sid}").json()
        assert info["tool_calls"] == 2 and len(info["images"]) == 3
        calls = client.get(f"/v1/sessions/{sid}/trajectory").json()["calls"]
        assert [c["keys"] for c in calls] == [["observation_1"], ["observation_2"]]
        reused = client.post(url, json={**ZOOM, "bbox_2d": [0, 0, 50, 50]}, headers={"Idempotency-Key": "k1"})
        assert reused.status_code == 409 and reused.json()["code"] == "idempotency_key_reused"
        assert client.post(url, json=ZOOM, headers={"Idempotency-Key": ""}).status_code == 422


def test_a_failed_call_is_replayed_as_failed_and_counted_once(settings_any_store: Settings):
    with TestClient(create_app(settings_any_store)) as client:
        sid = session(client)
        url = f"/v1/sessions/{sid}/tools/zoom_in"
        bad = {"image": "nope", "bbox_2d": [0, 0, 10, 10]}
        first = client.post(url, json=bad, headers={"Idempotency-Key": "f"}).json()
        assert not first["ok"]
        assert client.post(url, json=bad, headers={"Idempotency-Key": "f"}).json() == first
        assert client.get(f"/v1/sessions/{sid}").json()["tool_calls"] == 1


def test_tool_call_ids_and_act_turns_are_keys(settings_any_store: Settings):
    with TestClient(create_app(settings_any_store)) as client:
        sid = session(client)
        body = {"tool_calls": [{"id": "call_a", "type": "function",
                                "function": {"name": "zoom_in", "arguments": '{"image": "original_image", '
                                                                             '"bbox_2d": [0, 0, 100, 100]}'}}]}
        first = client.post(f"/v1/sessions/{sid}/tool_calls", json=body).json()
        assert client.post(f"/v1/sessions/{sid}/tool_calls", json=body).json() == first
        # The same id with other arguments is another call (ids restart in some frameworks), not a conflict.
        body["tool_calls"][0]["function"]["arguments"] = '{"image": "original_image", "bbox_2d": [0, 0, 90, 90]}'
        second = client.post(f"/v1/sessions/{sid}/tool_calls", json=body).json()
        assert second["results"][0]["images"][0]["key"] == "observation_2"
        turn = ('<tool_call>{"name": "zoom_in", "arguments": {"image": "original_image", '
                '"bbox_2d": [5, 5, 120, 120]}}</tool_call>')
        acted = client.post(f"/v1/sessions/{sid}/act", json={"text": turn}, headers={"Idempotency-Key": "t1"}).json()
        again = client.post(f"/v1/sessions/{sid}/act", json={"text": turn}, headers={"Idempotency-Key": "t1"}).json()
        assert again == acted and acted["results"][0]["images"][0]["key"] == "observation_3"
        assert client.get(f"/v1/sessions/{sid}").json()["tool_calls"] == 3


def test_a_replay_returns_the_systems_own_bytes(settings_any_store: Settings):
    """Pixel-Reasoner's results are its JPEG bytes, which encoding the decoded pixels again would not give."""
    with TestClient(create_app(settings_any_store)) as client:
        sid = session(client, profile="pixel-reasoner")
        url = f"/v1/sessions/{sid}/tools/crop_image"
        args = {"bbox_2d": [0.1, 0.1, 0.6, 0.7], "target_image": 1}
        first = client.post(url, json=args, headers={"Idempotency-Key": "j"}).json()
        again = client.post(url, json=args, headers={"Idempotency-Key": "j"}).json()
        assert first["images"][0]["mime"] == "image/jpeg"
        assert base64.b64decode(again["images"][0]["data"]) == base64.b64decode(first["images"][0]["data"])


def test_the_client_sends_a_key_and_reuses_it_on_every_retry():
    answer = httpx.Response(200, json={"ok": True, "tool": "zoom_in", "text": "done", "images": []})
    busy = httpx.Response(503, json={"detail": "unconfirmed", "code": "outcome_unknown"}, headers={"Retry-After": "0"})
    no_upstream = httpx.Response(502, text="<html>502 Bad Gateway</html>")  # nginx with no live replica
    transport, calls = scripted(busy, httpx.ReadTimeout("slow"), no_upstream, answer)
    with Client("http://ts", transport=transport, backoff=0.01) as client:
        handle = Session(client, SessionCreated(session_id="s", profile="default", images=[], texts=[],
                                                expires_in_s=60))
        assert handle.call("zoom_in", ZOOM).text == "done"
        keys = {request.headers["Idempotency-Key"] for _, request in calls}
        assert len(calls) == 4 and len(keys) == 1  # the unknown outcome, the timeout, the 502: retried, same key
        handle.call("zoom_in", ZOOM)
        assert calls[-1][1].headers["Idempotency-Key"] not in keys  # a new call, a new key
    # Requests without a key (everything but tool calls) still do not retry a timeout or a 502: they may have run.
    transport, calls = scripted(httpx.ReadTimeout("slow"), answer)
    with Client("http://ts", transport=transport, backoff=0.01) as client, pytest.raises(ToolServerTimeout):
        client.profiles()
    assert len(calls) == 1
    transport, calls = scripted(no_upstream, answer)
    with Client("http://ts", transport=transport, backoff=0.01) as client, pytest.raises(ToolServerError):
        client.profiles()
    assert len(calls) == 1


def ok_profiles():
    return httpx.Response(200, json=[{"name": "default"}])


def test_a_keyed_call_is_retried_after_a_proxy_s_500_but_not_after_the_server_s_own():
    """Ray Serve answers a request whose replica died mid-call with a plain-text 500: with a key the call is sent
    again (it runs once); toolserver's own 500 (`internal_error`) is a bug, not retried."""
    answer = httpx.Response(200, json={"ok": True, "tool": "zoom_in", "text": "done", "images": []})
    replica_died = httpx.Response(500, text="The actor died unexpectedly before finishing this task.")
    ours = httpx.Response(500, json={"detail": "internal error", "code": "internal_error"})
    created = SessionCreated(session_id="s", profile="default", images=[], texts=[], expires_in_s=60)
    transport, calls = scripted(replica_died, answer)
    with Client("http://ts", transport=transport, backoff=0.01) as client:
        assert Session(client, created).call("zoom_in", ZOOM).text == "done"
    assert len(calls) == 2 and len({r.headers["Idempotency-Key"] for _, r in calls}) == 1
    transport, calls = scripted(ours, answer)
    with Client("http://ts", transport=transport, backoff=0.01) as client, pytest.raises(ToolServerError):
        Session(client, created).call("zoom_in", ZOOM)
    assert len(calls) == 1
    transport, calls = scripted(replica_died, ok_profiles())  # no key: never retried
    with Client("http://ts", transport=transport, backoff=0.01) as client, pytest.raises(ToolServerError):
        client.profiles()
    assert len(calls) == 1


# -- the Redis store: the fence and unknown outcomes ------------------------------------------------------
async def _new_session(core: Core) -> str:
    created = await core.create_session(CreateSessionRequest(), [RawImage(png_bytes(gradient(64, 48)))])
    return created.session_id


@pytest.fixture
def redis_settings(tmp_path, shared_redis) -> Settings:
    from tests.conftest import _prefixes

    return Settings(data_dir=tmp_path / "data", workers=2, session_store="redis", redis_url=shared_redis.url,
                    redis_prefix=f"t{next(_prefixes)}", sr_model_dir=tmp_path / "no-weights")


def test_a_call_whose_lock_lapsed_commits_nothing(redis_settings: Settings):
    async def main():
        core = Core(redis_settings)
        sid = await _new_session(core)
        store = core.services.store
        async with store.exclusive(sid) as session:
            await store.redis.delete(store._key(sid, "lock"))  # the lease ran out; another call may run now
            with pytest.raises(Unavailable) as refused:
                await store.commit_call(session, CallCommit(record="{}"))
            assert refused.value.code == "session_lock_lost"
        info = await core.session_info(sid)
        assert info.tool_calls == 0
        assert (await core.trajectory(sid)).calls == []
        await core.stop()

    asyncio.run(main())


def test_an_unconfirmed_commit_is_its_own_error_and_a_retry_runs_the_call_once(redis_settings: Settings,
                                                                              monkeypatch):
    async def main():
        core = Core(redis_settings)
        sid = await _new_session(core)
        store = core.services.store
        real = store._commit

        async def lost_reply(**kwargs):
            await real(**kwargs)  # written, but the answer never arrives
            raise redis_lib.TimeoutError("Timeout reading from socket")

        monkeypatch.setattr(store, "_commit", lost_reply)
        with pytest.raises(Unavailable) as unknown:
            await core.call_tool(sid, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500]}, idempotency_key="x")
        assert unknown.value.code == "outcome_unknown" and unknown.value.status == 503
        monkeypatch.setattr(store, "_commit", real)
        retried = await core.call_tool(sid, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500]},
                                       idempotency_key="x")
        assert retried.ok and retried.images[0].key == "observation_1"  # the recorded result: not run again
        info = await core.session_info(sid)
        assert info.tool_calls == 1 and [i.key for i in info.images] == ["original_image", "observation_1"]
        await core.stop()

    asyncio.run(main())


def test_a_renewal_that_swallows_its_cancel_does_not_keep_the_session_locked(redis_settings: Settings,
                                                                             monkeypatch):
    """redis-py can turn a cancel that lands inside a command during a stall into a store error; the chaos soak
    saw a renewal carry on after it, its holder waiting for it forever with the session locked."""
    import redis.asyncio.lock as alock

    async def swallowing(self):
        try:
            await asyncio.sleep(30)  # a command stuck in a stall
        except asyncio.CancelledError:
            raise redis_lib.TimeoutError("Timeout reading from socket") from None

    async def main():
        core = Core(redis_settings.model_copy(update={"lock_lease_s": 0.3}))
        sid = await _new_session(core)
        store = core.services.store
        monkeypatch.setattr(alock.Lock, "reacquire", swallowing)
        loop = asyncio.get_running_loop()
        async with store.exclusive(sid):
            renewals = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "SessionLocks._renew"]
            await asyncio.sleep(0.25)  # the renewal is inside its command now
            left = loop.time()
        assert await store.redis.exists(store._key(sid, "lock")) == 0  # released
        assert len(renewals) == 1
        await asyncio.wait(renewals, timeout=2)
        assert all(t.done() for t in renewals)
        assert loop.time() - left < 2
        await core.stop()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_call_stuck_past_the_longest_hold_lets_its_session_go(redis_settings: Settings):
    async def main():
        core = Core(redis_settings.model_copy(update={"lock_lease_s": 0.3}))
        sid = await _new_session(core)
        store = core.services.store
        store.locks.max_hold_s = 0.5
        async with store.exclusive(sid) as stuck:
            await asyncio.sleep(1.5)  # stuck past the longest hold: the lease was left to run out
            assert await store.redis.exists(store._key(sid, "lock")) == 0
            with pytest.raises(Unavailable) as refused:
                await store.commit_call(stuck, CallCommit(record="{}"))
            assert refused.value.code == "session_lock_lost"
        async with store.exclusive(sid) as session:  # taken at once by the next call
            assert session.tool_calls == 0
        await core.stop()

    asyncio.run(asyncio.wait_for(main(), 10))
