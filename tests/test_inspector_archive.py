"""Finished sessions stay browsable: the trajectory archive over HTTP (newest first, filters, thumbnails, owners,
its bound), and who may list sessions when the server listens on every address without keys."""

from __future__ import annotations

import io
import shutil
import time

from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app

PICTURE = {"data": b64(png_bytes(gradient(640, 480)))}
LOCAL, REMOTE = ("127.0.0.1", 40000), ("203.0.113.9", 40000)


def session(client: TestClient, **body) -> str:
    r = client.post("/v1/sessions", json={"images": [PICTURE], **body})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def zoom(client: TestClient, sid: str, box: list[int], **kw) -> bool:
    return client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": box}, **kw).json()["ok"]


def finished(client: TestClient, **params) -> list[str]:
    client.app.state.core.archive.flush()
    r = client.get("/v1/trajectories", params=params)
    assert r.status_code == 200, r.text
    return [s["session_id"] for s in r.json()["sessions"]]


def test_finished_sessions_newest_first_filtered_with_their_calls_and_images(settings):
    with TestClient(create_app(settings)) as client:
        first = session(client)
        assert zoom(client, first, [0, 0, 500, 500]) and not zoom(client, first, [600, 0, 100, 100])
        second, live = session(client, profile="deepeyes"), session(client)
        short = session(client, ttl_s=0.2)
        client.delete(f"/v1/sessions/{first}")
        time.sleep(0.05)  # ended_at orders them
        client.delete(f"/v1/sessions/{second}")
        time.sleep(0.3)
        assert client.get(f"/v1/sessions/{short}").status_code == 410  # it ends as it is found expired
        assert finished(client) == [short, second, first]  # newest first; the live one is not finished
        assert live not in finished(client)
        assert finished(client, profile="deepeyes") == [second]
        assert finished(client, outcome="expired") == [short]
        assert finished(client, q=first[3:12]) == [first]
        assert finished(client, failed="true") == [first] and first not in finished(client, failed="false")
        assert finished(client, limit=1, offset=1) == [second]
        assert client.get("/v1/trajectories", params={"outcome": "exploded"}).status_code == 422
        row = client.get("/v1/trajectories", params={"q": first}).json()["sessions"][0]
        assert row | {"created_at": 0, "ended_at": 0} == {
            "session_id": first, "profile": "default", "outcome": "released", "images": 2, "calls": 2,
            "failed_calls": 1, "created_at": 0, "ended_at": 0}
        trajectory = client.get(f"/v1/trajectories/{first}").json()
        assert [c["ok"] for c in trajectory["calls"]] == [True, False] and trajectory["outcome"] == "released"
        assert [i["key"] for i in trajectory["images"]] == ["original_image", "observation_1"]
        assert trajectory["calls"][0]["meta"]["box_original"] == [0, 0, 320, 240]
        thumb = client.get(f"/v1/trajectories/{first}/images/observation_1")
        assert thumb.headers["content-type"] == "image/jpeg"
        assert Image.open(io.BytesIO(thumb.content)).size == (320, 240)
        assert client.get(f"/v1/trajectories/{first}/images/nope").json()["code"] == "unknown_image"
        assert client.get(f"/v1/trajectories/{live}").json()["code"] == "unknown_trajectory"


def test_sessions_live_at_stop_are_kept_and_read_back_by_the_next_server(settings):
    with TestClient(create_app(settings)) as client:
        sid = session(client)
        zoom(client, sid, [0, 0, 500, 500])
    with TestClient(create_app(settings), client=LOCAL) as client:
        assert finished(client, outcome="stopped") == [sid]
        assert len(client.get(f"/v1/trajectories/{sid}").json()["calls"]) == 1


def test_the_archive_keeps_the_newest_sessions_up_to_its_bound(settings):
    bounded = settings.model_copy(update={"archive_max_sessions": 2})
    with TestClient(create_app(bounded)) as client:
        ids = [session(client) for _ in range(3)]
        for sid in ids:
            client.delete(f"/v1/sessions/{sid}")
            time.sleep(0.02)
        assert finished(client) == ids[:0:-1]
        assert not (bounded.resolved_archive_dir() / ids[0]).exists()
    off = settings.model_copy(update={"archive_max_sessions": 0, "data_dir": settings.data_dir / "off"})
    with TestClient(create_app(off)) as client:
        client.delete(f"/v1/sessions/{session(client)}")
        assert finished(client) == []


def test_a_finished_session_stays_its_owner_s(settings):
    keyed = settings.model_copy(update={"api_keys": ["key-a", "key-b"], "operator_keys": ["operator"]})
    a, b, op = ({"Authorization": f"Bearer {k}"} for k in ("key-a", "key-b", "operator"))
    with TestClient(create_app(keyed)) as client:
        sid = client.post("/v1/sessions", json={"images": [PICTURE]}, headers=a).json()["session_id"]
        client.delete(f"/v1/sessions/{sid}", headers=a)
        client.app.state.core.archive.flush()
        assert client.get("/v1/trajectories").status_code == 401
        listed = {name: [s["session_id"] for s in client.get("/v1/trajectories", headers=h).json()["sessions"]]
                  for name, h in (("a", a), ("b", b), ("operator", op))}
        assert listed == {"a": [sid], "b": [], "operator": [sid]}
        assert client.get(f"/v1/trajectories/{sid}", headers=b).status_code == 404
        assert client.get(f"/v1/trajectories/{sid}/images/original_image", headers=b).status_code == 404
        assert client.get(f"/v1/trajectories/{sid}", headers=a).status_code == 200


def test_listing_on_every_address_without_keys_answers_this_machine_only(settings):
    public = settings.model_copy(update={"host": "0.0.0.0"})  # `toolserver serve --host 0.0.0.0`, no keys
    app = create_app(public)
    with TestClient(app, client=LOCAL) as local:
        assert local.get("/v1/sessions").status_code == 200
        assert local.get("/v1/trajectories").status_code == 200
        proxied = local.get("/v1/sessions", headers={"X-Forwarded-For": "198.51.100.7"})
        assert proxied.status_code == 403 and proxied.json()["code"] == "listing_disabled"
        assert local.get("/v1/trajectories", headers={"Forwarded": "for=198.51.100.7"}).status_code == 403
    with TestClient(create_app(public), client=REMOTE) as remote:
        for path in ("/v1/sessions", "/v1/trajectories"):
            r = remote.get(path)
            assert r.status_code == 403 and r.json()["code"] == "listing_disabled"
    with TestClient(create_app(public.model_copy(update={"session_list": "on"})), client=REMOTE) as remote:
        assert remote.get("/v1/trajectories").status_code == 200
    with TestClient(create_app(public.model_copy(update={"session_list": "off"})), client=LOCAL) as local:
        assert local.get("/v1/sessions").status_code == 403


def test_a_backlog_of_sessions_is_kept_without_thumbnails(settings, monkeypatch):
    from toolserver.core import archive

    monkeypatch.setattr(archive, "MAX_PENDING", 0)  # every session finds the writer busy
    with TestClient(create_app(settings)) as client:
        sid = session(client)
        zoom(client, sid, [0, 0, 500, 500])
        client.delete(f"/v1/sessions/{sid}")
        assert finished(client) == [sid]
        assert len(client.get(f"/v1/trajectories/{sid}").json()["calls"]) == 1
        assert client.get(f"/v1/trajectories/{sid}/images/original_image").json()["code"] == "unknown_image"


def test_a_released_redis_session_is_archived_and_every_worker_of_the_node_lists_it(settings, shared_redis):
    # Two apps on one Redis and one data directory: two workers of `toolserver serve --workers 2`.
    shared = settings.model_copy(update={"session_store": "redis", "redis_url": shared_redis.url,
                                         "redis_prefix": "archive-node"})
    with TestClient(create_app(shared)) as one, TestClient(create_app(shared)) as other:
        assert finished(other) == []  # the other worker has read the (empty) archive before anything ended
        sid = session(one)
        assert zoom(other, sid, [0, 0, 500, 500])
        assert other.delete(f"/v1/sessions/{sid}").status_code == 204
        assert finished(other) == [sid]
        assert finished(one) == [sid]  # written by the other process, seen here
        trajectory = one.get(f"/v1/trajectories/{sid}").json()
        assert [c["ok"] for c in trajectory["calls"]] == [True] and trajectory["outcome"] == "released"
        thumbnail = one.get(f"/v1/trajectories/{sid}/images/{trajectory['images'][1]['key']}")
        assert thumbnail.status_code == 200 and Image.open(io.BytesIO(thumbnail.content)).size == (320, 240)  # rel1000
        later = session(other)
        assert other.delete(f"/v1/sessions/{later}").status_code == 204
        assert finished(other) == [later, sid]  # (its writer has finished)
        assert finished(one) == [later, sid]  # one more folder: only it is read
        shutil.rmtree(shared.resolved_archive_dir() / sid)  # as another worker's trim removes the oldest
        assert finished(one) == [later] and finished(other) == [later]
