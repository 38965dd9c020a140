"""The ORS endpoint (docs/ors.md) over HTTP and through `Core.ors`: environments, splits and tasks from a JSONL
dataset, the prompt's images, calls answered as server-sent events carrying `/act`'s rendering, `finished` and the
profile's reward, the protocol's errors, and sessions that end when idle. The `openreward` client itself runs in
tests_frameworks/test_ors.py."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import b64, gradient, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.core.ors_tasks import TaskSets
from toolserver.errors import BadRequest, NotFound
from toolserver.profiles import PROFILES

PIXEL_ZOOM = {"bbox_2d": [0.1, 0.1, 0.5, 0.5], "target_image": 1}
PIXEL_ANSWER = "The answer is \\boxed{red}."


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "picture.png").write_bytes(png_bytes(gradient(200, 100)))
    rows = [{"id": "a", "question": "What colour?", "images": ["picture.png"], "ground_truth": "red"},
            {"question": "Inline image", "images": [b64(png_bytes(gradient(40, 30)))], "ground_truth": "blue"}]
    (folder / "pixel-reasoner.train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / "pixel-reasoner.dev.jsonl").write_text(json.dumps(rows[0]) + "\n")
    return folder


@pytest.fixture
def client(settings: Settings, tasks_dir: Path):
    with TestClient(create_app(settings.model_copy(update={"ors_tasks": str(tasks_dir)}))) as c:
        yield c


def events(text: str) -> list[tuple[str, str]]:
    out, event = [], None
    for line in text.splitlines():
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event is not None:
            out.append((event, line.split(":", 1)[1].strip()))
            event = None
    return out


def open_session(client: TestClient, env: str, **create: Any) -> dict[str, str]:
    sid = dict(events(client.post("/create_session").text))["task_id"]
    answer = client.post("/create", json={"env_name": env, **create}, headers={"X-Session-ID": sid})
    assert answer.status_code == 200, answer.text
    return {"X-Session-ID": sid}


def call(client: TestClient, env: str, headers: dict[str, str], name: str, arguments: dict[str, Any]) -> Any:
    answer = client.post(f"/{env}/call", json={"name": name, "input": arguments}, headers=headers)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    got = events(answer.text)
    assert got[0][0] == "task_id"
    assert got[-1][0] == "end", got
    return json.loads(got[-1][1])


def test_every_profile_is_an_environment_with_its_tools(client):
    assert client.get("/list_environments").json() == list(PROFILES)
    tools = client.get("/pixel-reasoner/tools").json()
    assert {t["name"] for t in tools["tools"]} == set(PROFILES.get("pixel-reasoner").tools)
    assert tools["terminal_tool"] == {"name": "final_answer", "arg": "message", "description": tools[
        "terminal_tool"]["description"]}
    assert client.get("/tools", headers={"X-Deployment": "deepeyes"}).json()["tools"][0]["name"] in \
        PROFILES.get("deepeyes").tools
    missing = client.get("/no-such-profile/tools")
    assert missing.status_code == 404 and missing.json()["code"] == "unknown_environment"


def test_splits_and_tasks_come_from_the_dataset(client):
    assert client.get("/pixel-reasoner/splits").json() == [{"name": "dev", "type": "validation"},
                                                             {"name": "train", "type": "train"}]
    assert client.get("/default/splits").json() == []
    listed = client.post("/pixel-reasoner/tasks", json={"split": "train"}).json()
    assert listed == {"tasks": [{"split": "train", "index": 0, "id": "a"}, {"split": "train", "index": 1}],
                      "env_name": "pixel-reasoner"}
    assert client.post("/pixel-reasoner/num_tasks", json={"split": "train"}).json() == {"num_tasks": 2}
    assert client.post("/pixel-reasoner/task", json={"split": "train", "index": 1}).json()["task"]["index"] == 1
    assert client.post("/pixel-reasoner/tasks", json={"split": "nope"}).status_code == 422


def test_a_trajectory_shows_what_act_shows_and_ends_with_the_reward(client):
    headers = open_session(client, "pixel-reasoner", split="train", index=0)
    prompt = client.get("/pixel-reasoner/prompt", headers=headers).json()
    assert prompt[0]["type"] == "image" and prompt[0]["mimeType"] == "image/png"
    assert prompt[-1] == {"type": "text", "text": "What colour?"}
    twin = client.post("/v1/sessions", json={"profile": "pixel-reasoner", "images": [
        {"data": prompt[0]["data"]}]}).json()["session_id"]
    first = call(client, "pixel-reasoner", headers, "crop_image", PIXEL_ZOOM)
    assert first["ok"] and first["output"]["finished"] is False and first["output"]["reward"] == 0.0
    turn = '<tool_call>{"name": "crop_image", "arguments": ' + json.dumps(PIXEL_ZOOM) + '}</tool_call>'
    expected = client.post(f"/v1/sessions/{twin}/act", json={"text": turn}).json()
    output = first["output"]
    assert output["metadata"]["prompt"] == expected["prompt"]
    images = [b for b in output["blocks"] if b["type"] == "image"]
    shown = [p["image_url"]["url"].split(",", 1)[1] for m in expected["observation"]
             for p in (m["content"] if isinstance(m["content"], list) else []) if p["type"] == "image_url"]
    assert [b["data"] for b in images] == shown and len(shown) == 1
    last = call(client, "pixel-reasoner", headers, "final_answer", {"message": PIXEL_ANSWER})["output"]
    assert last["finished"] is True and last["reward"] == 1.0
    assert last["metadata"]["reward"]["terms"]["accuracy"] == 1.0
    after = call(client, "pixel-reasoner", headers, "crop_image", PIXEL_ZOOM)
    assert after == {"ok": False, "error": after["error"], "reason": "episode_finished"}


def test_a_profile_without_a_reward_answers_none_and_an_inline_task(client):
    image = b64(png_bytes(gradient(64, 48)))
    headers = open_session(client, "default", task_spec={"question": "Look", "images": [image]})
    zoom = call(client, "default", headers, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500]})["output"]
    assert zoom["reward"] is None and zoom["finished"] is False and zoom["blocks"]
    done = call(client, "default", headers, "final_answer", {"message": "It is a gradient."})["output"]
    assert done["finished"] is True and done["reward"] is None


def test_malformed_messages_get_the_protocols_errors_and_other_sessions_go_on(client):
    other = open_session(client, "pixel-reasoner", split="train", index=1)
    headers = open_session(client, "pixel-reasoner", split="train", index=0)
    unknown = call(client, "pixel-reasoner", headers, "no_such_tool", {})
    assert unknown["ok"] is False and unknown["reason"] == "not_found"
    bad = call(client, "pixel-reasoner", headers, "final_answer", {"message": 3})
    assert bad["ok"] is False and bad["reason"] == "input_validation"
    failed = call(client, "pixel-reasoner", headers, "crop_image", {"bbox_2d": [2, 2, 3, 3], "target_image": 9})
    assert failed["ok"] is True and failed["output"]["finished"] is False  # a tool's failure: /act's text
    assert failed["output"]["blocks"] == [{"type": "text", "text": failed["output"]["metadata"]["results"][0]["text"]}]
    assert failed["output"]["metadata"]["results"][0]["ok"] is False
    shape = client.post("/pixel-reasoner/call", json={"name": "crop_image", "input": [1]}, headers=headers)
    assert shape.status_code == 422
    assert client.post("/pixel-reasoner/call", json={"name": "x", "input": {}}).status_code == 422  # no session id
    gone = client.post("/pixel-reasoner/call", json={"name": "x", "input": {}}, headers={"X-Session-ID": "nope"})
    assert gone.status_code == 404 and "not found" in gone.json()["detail"]
    assert client.post("/create", json={"env_name": "pixel-reasoner"}, headers={"X-Session-ID": "s"}
                       ).status_code == 422
    assert client.post("/create", json={"env_name": "pixel-reasoner", "split": "train", "index": 9},
                       headers={"X-Session-ID": "s"}).status_code == 404
    assert call(client, "pixel-reasoner", other, "crop_image", PIXEL_ZOOM)["ok"] is True
    assert client.post("/ping", headers=other).json() == {"status": "ok"}
    assert client.post("/delete", headers=other).status_code == 200
    assert client.post("/ping", headers=other).status_code == 404


def test_idle_sessions_end_with_their_toolserver_session(settings, tasks_dir):
    core = Core(settings.model_copy(update={"ors_tasks": str(tasks_dir), "ors_idle_timeout_s": 0.01}))

    async def scenario() -> None:
        await core.ors.create("s1", "pixel-reasoner", core.ors.tasks.task("pixel-reasoner", {"split": "dev",
                                                                                             "index": 0}))
        session_id = core.ors.get("s1").session_id
        await asyncio.sleep(0.05)
        await core.ors.sweep()
        with pytest.raises(NotFound):
            core.ors.get("s1")
        with pytest.raises(NotFound):
            await core.session_info(session_id)
    asyncio.run(scenario())


def test_a_task_file_with_rows_naming_their_split(tmp_path: Path):
    path = tmp_path / "all.jsonl"
    image = base64.b64encode(png_bytes(gradient(8, 8))).decode()
    path.write_text(json.dumps({"question": "q", "images": image, "split": "test", "ground_truth": 1}) + "\n" +
                    json.dumps({"question": "r", "profile": "deepeyes"}) + "\n")
    sets = TaskSets(str(path))
    assert sets.splits("default") == ["test"] and sets.splits("deepeyes") == ["test", "train"]
    assert sets.task("default", {"split": "test", "index": 0}).images == (image,)
    with pytest.raises(BadRequest, match="neither a readable file nor base64"):
        sets.task("default", {"question": "q", "images": ["/etc/passwd"]})
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(BadRequest, match="line 1 is not JSON"):
        TaskSets(str(tmp_path / "bad.jsonl")).splits("default")


def test_the_terminal_tool_can_be_listed_for_harnesses_that_ignore_terminal_tool(settings):
    with TestClient(create_app(settings.model_copy(update={"ors_terminal_in_tools": True}))) as c:
        tools = c.get("/default/tools").json()
    assert tools["tools"][-1]["name"] == tools["terminal_tool"]["name"] == "final_answer"
    assert tools["tools"][-1]["input_schema"]["required"] == ["message"]


def test_several_server_processes_refuse_ors_with_the_remedy(settings):
    with TestClient(create_app(settings.model_copy(update={"worker_index": 1}))) as c:
        refused = c.post("/create_session")
    assert refused.status_code == 409 and refused.json()["code"] == "ors_needs_one_process"
    assert "--workers 1" in refused.json()["detail"]


def test_with_api_keys_an_ors_session_belongs_to_its_key(settings):
    keyed = settings.model_copy(update={"api_keys": ["key-a", "key-b"]})
    with TestClient(create_app(keyed)) as c:
        assert c.post("/create_session").status_code == 401
        a, b = {"X-API-Key": "key-a"}, {"X-API-Key": "key-b"}
        sid = dict(events(c.post("/create_session", headers=a).text))["task_id"]
        image = b64(png_bytes(gradient(32, 32)))
        created = c.post("/create", headers={**a, "X-Session-ID": sid},
                         json={"env_name": "default", "task_spec": {"question": "q", "images": [image]}})
        assert created.status_code == 200
        assert c.post("/ping", headers={**a, "X-Session-ID": sid}).status_code == 200
        assert c.post("/ping", headers={**b, "X-Session-ID": sid}).status_code == 404
        assert c.get("/default/prompt", headers={**b, "X-Session-ID": sid}).status_code == 404
        assert c.post("/delete", headers={**b, "X-Session-ID": sid}).status_code == 200  # not b's to end
        assert c.post("/ping", headers={**a, "X-Session-ID": sid}).status_code == 200


def test_a_final_message_holding_a_call_goes_on_and_a_reward_that_cannot_score_is_said(client):
    image = b64(png_bytes(gradient(64, 48)))
    headers = open_session(client, "default", task_spec={"question": "Look", "images": [image]})
    zoom = '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'
    out = call(client, "default", headers, "final_answer", {"message": zoom})["output"]
    assert out["finished"] is False and [b["type"] for b in out["blocks"]] == ["image", "text"]
    headers = open_session(client, "deepeyes", task_spec={"question": "Look", "images": [image],
                                                          "ground_truth": "red"})
    out = call(client, "deepeyes", headers, "final_answer", {"message": "<answer>red</answer>"})["output"]
    assert out["finished"] is True and out["reward"] is None  # DeepEyes' reward asks a judge; none is configured
    assert out["metadata"]["reward_error"]["code"] == "judge_not_configured"
