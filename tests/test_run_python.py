"""`run_python` through the API: images in under their names, texts and images out, the failures' codes and texts,
and what the session, the trajectory, `/readyz` and `/metrics` show of it."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sandbox_timeout_s=2, sandbox_max_output_bytes=300,
                        sandbox_max_images=2, sandbox_disk_mb=8, sr_model_dir=tmp_path_factory.mktemp("no-weights"))
    with TestClient(create_app(settings)) as client:
        yield client


def new_session(client: TestClient) -> str:
    body = {"images": [{"data": b64(png_bytes(gradient(320, 240)))}]}
    return client.post("/v1/sessions", json=body).json()["session_id"]


def run(client: TestClient, sid: str, code: str, **extra) -> dict:
    answer = client.post(f"/v1/sessions/{sid}/tools/run_python", json={"code": code, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_images_under_their_names_and_what_the_code_shows_joins_the_session(client):
    sid = new_session(client)
    result = run(client, sid, "print(image_1.size, original_image is image_1, len(images))\n"
                              "display(image_1.crop((0, 0, 100, 50)))\n"
                              "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 2), dpi=40)\nplt.show()")
    assert result["ok"] and result["text"] == (
        "stdout:\n(320, 240) True 1\n"
        "The code showed 2 images: `observation_1` (index 1), 100x50 pixels; `observation_2` (index 2), 80x80 pixels.")
    assert [(i["key"], i["width"], i["height"]) for i in result["images"]] == [("observation_1", 100, 50),
                                                                               ("observation_2", 80, 80)]
    again = run(client, sid, "print(observation_1.size, image_2.size)", images=["observation_1", 0])
    assert again["text"] == "stdout:\n(100, 50) (320, 240)"
    calls = client.get(f"/v1/sessions/{sid}/trajectory").json()["calls"]
    assert [c["tool"] for c in calls] == ["run_python", "run_python"] and calls[0]["keys"] == ["observation_1",
                                                                                                "observation_2"]


def test_output_is_cut_with_a_marker_and_images_past_the_cap_are_counted(client):
    sid = new_session(client)
    result = run(client, sid, "import sys\nprint('a' * 1000)\nsys.stderr.write('warn')\n"
                              "for _ in range(3):\n    display(image_1)")
    assert result["text"].startswith("stdout:\n" + "a" * 300 + "\n[stdout truncated: 701 more bytes not shown]\n"
                                     "stderr:\nwarn\nThe code showed 2 images: ")
    assert result["text"].endswith("1 more were not kept (at most 2 images a call, each within the pixel limit).")


def test_failures_answer_with_their_codes_and_the_code_s_own_words(client):
    sid = new_session(client)
    error = run(client, sid, "print('partial')\n{}['missing']")
    assert not error["ok"] and error["error"]["code"] == "code_error"
    assert error["text"] == ("stdout:\npartial\nTraceback (most recent call last):\n  File \"<code>\", line 2, in "
                             "<module>\n    {}['missing']\n     ~~^^^^^^^^^^^\nKeyError: 'missing'")
    late = run(client, sid, "while True:\n    pass")
    assert late["error"]["code"] == "timeout"
    assert late["text"] == "Error: the code did not finish within 2 s and was stopped."
    unknown = run(client, sid, "print(1)", images=["nope"])
    assert unknown["error"]["code"] == "unknown_image"
    assert client.get(f"/v1/sessions/{sid}").json()["tool_calls"] == 3
    bad = client.post(f"/v1/sessions/{sid}/tools/run_python", json={"code": ""}).json()
    assert bad["error"]["code"] == "invalid_arguments"


def test_a_run_that_fills_its_disk_quota_is_stopped_and_told_so(client):
    sid = new_session(client)
    full = run(client, sid, "i = 0\nwhile True:\n    try:\n        open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n"
                            "    except OSError:\n        pass\n    i += 1")
    assert full["error"]["code"] == "disk_quota"
    assert full["text"] == ("Error: the code's files (its working directory and /tmp) reached the disk quota of 8 MiB "
                            "and it was stopped; nothing was kept.")


def test_readyz_reports_the_isolation_and_metrics_count_executions(client):
    sid = new_session(client)
    run(client, sid, "print(1)")
    sandbox = client.get("/readyz").json()["sandbox"]
    assert sandbox["isolation"] in ("namespaces", "restricted") and sandbox["required"] == "restricted"
    assert sandbox["levels"][sandbox["isolation"]] == "ok"
    assert sandbox["cpu_policy"] == "idle" and sandbox["disk_mb"] == 8 and sandbox["slots"] >= 1
    metrics = client.get("/metrics").text
    assert 'toolserver_sandbox_executions_total{outcome="ok"}' in metrics
    assert "toolserver_sandbox_live_executions 0.0" in metrics


def test_below_the_required_isolation_code_is_not_run(client):
    sid = new_session(client)
    sandbox = client.app.state.core.services.sandbox
    found, required = dict(sandbox.levels), sandbox.config.min_level
    try:
        sandbox.levels = {"namespaces": "blocked by the host", "restricted": "ok"}
        object.__setattr__(sandbox.config, "min_level", "namespaces")
        result = run(client, sid, "print(1)")
    finally:
        sandbox.levels = found
        object.__setattr__(sandbox.config, "min_level", required)
    assert result["error"]["code"] == "sandbox_unavailable"
    assert result["text"] == ("Error: code execution is off on this server: it requires isolation level "
                              "'namespaces' and the best this host allows is 'restricted' (namespaces: blocked by the host; "
                              "restricted: ok).")
