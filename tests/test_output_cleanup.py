"""Files delivered by `path` go with their session: on release, and by the sweep once it expired."""

import asyncio
import time
from pathlib import Path

from tests.conftest import b64, gradient, png_bytes


def path_session(client, **settings) -> str:
    body = {"images": [{"data": b64(png_bytes(gradient(64, 48)))}], "output": {"delivery": "path"}, **settings}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def delivered(client, sid) -> Path:
    r = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]}).json()
    path = Path(r["images"][0]["path"])
    assert path.is_file() and path.parent.name == sid
    return path


def test_release_removes_the_sessions_files(client):
    sid = path_session(client)
    path = delivered(client, sid)
    assert client.delete(f"/v1/sessions/{sid}").status_code == 204
    assert not path.parent.exists()


def test_the_sweep_removes_files_of_expired_sessions_and_nothing_else(client):
    core = client.app.state.core
    expiring, kept = path_session(client, ttl_s=1), path_session(client)
    gone, stays = delivered(client, expiring), delivered(client, kept)
    trainer_dir = gone.parent.parent / "trainer-owned"
    trainer_dir.mkdir()
    time.sleep(1.3)
    assert asyncio.run(core._delivery.sweep_outputs(min_age_s=0)) == 1
    assert not gone.parent.exists() and stays.is_file() and trainer_dir.is_dir()


def test_the_output_directory_is_bounded(settings, tmp_path):
    from fastapi.testclient import TestClient

    from toolserver.api import create_app

    first_file = None
    with TestClient(create_app(settings)) as probe:
        first_file = delivered(probe, path_session(probe))
    bounded = settings.model_copy(update={"output_dir_max_bytes": 2 * first_file.stat().st_size + 10,
                                          "output_dir": tmp_path / "bounded"})
    with TestClient(create_app(bounded)) as client:
        sid = path_session(client)
        delivered(client, sid)
        delivered(client, sid)
        r = client.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [0, 0, 500, 500]})
        assert r.status_code == 507 and r.json()["code"] == "output_dir_full", r.text
        assert "release sessions" in r.json()["detail"]
        info = client.get(f"/v1/sessions/{sid}").json()
        assert info["tool_calls"] == 2 and len(info["images"]) == 3  # the refused call recorded nothing
        assert client.delete(f"/v1/sessions/{sid}").status_code == 204  # its files go, and free the room
        assert delivered(client, path_session(client)).is_file()
