"""The call log, the trajectory export, the session list and thumbnails, on both session stores."""

from __future__ import annotations

import io
import json

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app
from toolserver.stores import memory as memory_store
from toolserver.stores import redis as redis_store

PICTURE = gradient(640, 480)


def new_session(client: TestClient, **body) -> str:
    r = client.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(PICTURE))}], "texts": ["One. Two."],
                                          **body})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def three_calls(client: TestClient, sid: str) -> None:
    assert client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [100, 100, 500, 500]}).json()[
        "ok"]
    bad = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": [{
        "id": "c2", "type": "function", "function": {"name": "zoom_in",
                                                     "arguments": '{"image": 0, "bbox_2d": [600, 0, 100, 500]}'}}]})
    assert bad.json()["results"][0]["ok"] is False
    check = client.post(f"/v1/sessions/{sid}/tools/check_whether_response_sentence_number_in_range",
                        json={"response": "text_0", "lower_bound": 1, "upper_bound": 3})
    assert check.json()["text"] == "Check result: True"


def test_the_trajectory_lists_every_call_in_order(settings_any_store):
    with TestClient(create_app(settings_any_store)) as client:
        sid = new_session(client)
        three_calls(client, sid)
        body = client.get(f"/v1/sessions/{sid}/trajectory").json()
    assert body["session_id"] == sid and body["profile"] == "default" and body["dropped_calls"] == 0
    assert [(i["key"], i["index"], i["width"], i["height"], i["origin"]) for i in body["images"]] == [
        ("original_image", 0, 640, 480, "input"), ("observation_1", 1, 256, 192, "tool:zoom_in")]
    zoom, bad, check = body["calls"]
    assert [c["seq"] for c in body["calls"]] == [1, 2, 3]
    assert zoom["tool"] == "zoom_in" and zoom["ok"] and zoom["error_code"] is None
    assert zoom["arguments"] == {"image": 0, "bbox_2d": [100, 100, 500, 500]}
    assert zoom["keys"] == ["observation_1"] and zoom["meta"]["box_original"] == [64, 48, 320, 240]
    assert zoom["text"].startswith("Zoomed in on `original_image`")
    # Arguments as received: the model's own string when it came through /tool_calls.
    assert bad["arguments"] == '{"image": 0, "bbox_2d": [600, 0, 100, 500]}'
    assert not bad["ok"] and bad["error_code"] == "invalid_box" and bad["keys"] == []
    assert check["text"] == "Check result: True"
    assert all(c["duration_ms"] >= 0 and c["started_at"] > 1.7e9 for c in body["calls"])
    assert zoom["started_at"] <= bad["started_at"] <= check["started_at"]


def test_jsonl_streams_one_call_per_line(settings_any_store):
    with TestClient(create_app(settings_any_store)) as client:
        sid = new_session(client)
        three_calls(client, sid)
        whole = client.get(f"/v1/sessions/{sid}/trajectory").json()["calls"]
        r = client.get(f"/v1/sessions/{sid}/trajectory", params={"format": "jsonl"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
    assert [json.loads(line) for line in r.text.splitlines()] == whole


def test_a_replica_sees_the_calls_made_on_another(settings_any_store):
    if settings_any_store.session_store != "redis":
        pytest.skip("replicas share sessions only through Redis")
    with TestClient(create_app(settings_any_store)) as one, TestClient(create_app(settings_any_store)) as two:
        sid = new_session(one)
        three_calls(one, sid)
        assert two.post(f"/v1/sessions/{sid}/tools/lookback_reuse", json={"image": 0, "reason": "again"}).json()["ok"]
        seen_by_one = one.get(f"/v1/sessions/{sid}/trajectory").json()
        listed = two.get("/v1/sessions").json()
    assert [c["tool"] for c in seen_by_one["calls"]] == ["zoom_in", "zoom_in",
                                                         "check_whether_response_sentence_number_in_range",
                                                         "lookback_reuse"]
    assert next(row for row in listed["sessions"] if row["session_id"] == sid)["calls"] == 4


def test_the_log_keeps_the_last_calls_and_counts_the_rest(settings_any_store, monkeypatch):
    monkeypatch.setattr(memory_store, "CALL_LOG_LIMIT", 3)
    monkeypatch.setattr(redis_store, "CALL_LOG_LIMIT", 3)
    with TestClient(create_app(settings_any_store)) as client:
        sid = new_session(client)
        held = client.get(f"/v1/sessions/{sid}").json()["bytes_held"]
        for k in range(5):
            client.post(f"/v1/sessions/{sid}/tools/check_whether_response_word_count_in_range",
                        json={"response": "text_0", "lower_bound": k, "upper_bound": 10})
        body = client.get(f"/v1/sessions/{sid}/trajectory").json()
        held_after = client.get(f"/v1/sessions/{sid}").json()["bytes_held"]
    assert body["dropped_calls"] == 2 and [c["seq"] for c in body["calls"]] == [3, 4, 5]
    assert [c["arguments"]["lower_bound"] for c in body["calls"]] == [2, 3, 4]
    records = sum(len(json.dumps({k: v for k, v in c.items() if k != "seq"})) for c in body["calls"])
    assert held_after - held == pytest.approx(records, rel=0.1)  # the kept records count in the budget


def test_the_session_list_is_paged(settings_any_store):
    with TestClient(create_app(settings_any_store)) as client:
        made = [new_session(client) for _ in range(3)]
        client.post(f"/v1/sessions/{made[1]}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
        first = client.get("/v1/sessions", params={"limit": 2}).json()
        second = client.get("/v1/sessions", params={"offset": 2, "limit": 2}).json()
        bad = [client.get("/v1/sessions", params=p).status_code for p in ({"limit": 0}, {"limit": 501},
                                                                           {"offset": -1})]
    ours = [row for row in first["sessions"] + second["sessions"] if row["session_id"] in made]
    assert [row["session_id"] for row in ours] == made  # oldest first
    assert [(row["images"], row["calls"], row["profile"]) for row in ours] == [(1, 0, "default"), (2, 1, "default"),
                                                                               (1, 0, "default")]
    assert first["total"] == second["total"] >= 3 and first["limit"] == 2 and second["offset"] == 2
    assert bad == [422, 422, 422]


def test_thumbnails(settings_any_store):
    with TestClient(create_app(settings_any_store)) as client:
        sid = new_session(client)
        small = client.get(f"/v1/sessions/{sid}/images/original_image", params={"max_side": 160})
        by_index = client.get(f"/v1/sessions/{sid}/images/0", params={"max_side": 1000})
        errors = {n: client.get(f"/v1/sessions/{sid}/images/original_image", params={"max_side": n}).status_code
                  for n in (0, 100_000, -3)}
        unknown_key = client.get(f"/v1/sessions/{sid}/images/nope", params={"max_side": 100})
        unknown_session = client.get("/v1/sessions/nope/images/original_image", params={"max_side": 100})
    assert small.headers["content-type"] == "image/jpeg"
    assert Image.open(io.BytesIO(small.content)).size == (160, 120)
    assert Image.open(io.BytesIO(by_index.content)).size == (640, 480)  # never enlarged
    assert errors == {0: 422, 100_000: 422, -3: 422}
    assert unknown_key.status_code == 404 and unknown_key.json()["code"] == "unknown_image"
    assert unknown_session.status_code == 404


def test_unknown_and_foreign_sessions(settings):
    keyed = settings.model_copy(update={"api_keys": ["secret-key"], "host": "0.0.0.0"})
    with TestClient(create_app(keyed)) as client:
        auth = {"Authorization": "Bearer secret-key"}
        sid = client.post("/v1/sessions", json={}, headers=auth).json()["session_id"]
        assert client.get(f"/v1/sessions/{sid}/trajectory").status_code == 401  # no key
        assert client.get("/v1/sessions").status_code == 401
        assert client.get("/v1/sessions", headers=auth).status_code == 200  # keys configured: listing is on
        assert client.get("/v1/sessions/unknown/trajectory", headers=auth).status_code == 404
        client.delete(f"/v1/sessions/{sid}", headers=auth)
        assert client.get(f"/v1/sessions/{sid}/trajectory", headers=auth).status_code == 404
        page = client.get("/ui")  # the page itself is open: it asks for the key
        assert page.status_code == 200 and "toolserver inspector" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]


def test_listing_needs_a_key_or_a_loopback_host(settings):
    public = settings.model_copy(update={"host": "0.0.0.0"})
    with TestClient(create_app(public)) as client:
        r = client.get("/v1/sessions")
        assert r.status_code == 403 and r.json()["code"] == "listing_disabled"
        sid = new_session(client)
        assert client.get(f"/v1/sessions/{sid}/trajectory").status_code == 200  # the id is the key
    with TestClient(create_app(public.model_copy(update={"session_list": "on"}))) as client:
        assert client.get("/v1/sessions").status_code == 200
    with TestClient(create_app(settings.model_copy(update={"session_list": "off"}))) as client:
        assert client.get("/v1/sessions").status_code == 403
