"""NeMo Gym's image tools (`nemo-gym`) against what its own agent did (NVIDIA-NeMo/Gym @ 07d6b0d0, recorded by
scripts/goldens/record_nemo_gym.py into tests/data/nemo_gym_golden.json): every session of nemo_gym_sessions.py
through `/act`, turn by turn — `done`, the observation's texts byte for byte, each image the model is shown (the
agent's JPEG, bytes and pixels) and the one later calls read (the saved JPEG's pixels), the reward the agent
counted for the turn — then the same tools through `/tool_calls`, MCP, verl-tool's `/get_observation` and the
system prompt."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes, slow_cases
from tests.profiles.nemo_gym_sessions import CROP, FLIP, IMAGES, ROTATE, SESSIONS, ZOOM, xml
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles import PROFILES
from toolserver.profiles.nemo_gym import NO_MORE_CALLS, system_prompt

DATA = Path(__file__).parents[1] / "data"
GOLDEN = json.loads((DATA / "nemo_gym_golden.json").read_text())
RECORDED = {session["name"]: session for session in GOLDEN["sessions"]}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pixels(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode, "pixels_sha256": sha(image.tobytes())}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def start(client: TestClient, inputs: list[str]) -> str:
    images = [IMAGES[key]() for key in inputs]
    body = {"profile": "nemo-gym", "images": [{"data": b64(png_bytes(image))} for image in images]}
    return client.post("/v1/sessions", json=body).json()["session_id"]


def shown_as(client: TestClient, sid: str, part: dict[str, Any], key: str, recorded: dict[str, Any]) -> None:
    """An image part against the reference's: the JPEG the model is shown, and the pixels the session keeps."""
    prefix, data = part["image_url"]["url"].split(",", 1)
    raw = base64.b64decode(data)
    image = recorded["image"]
    assert prefix + "," == image["prefix"] and sha(raw) == image["bytes_sha256"]
    assert pixels(Image.open(io.BytesIO(raw)).convert("RGB")) == {k: image[k] for k in ("size", "mode",
                                                                                         "pixels_sha256")}
    kept = client.get(f"/v1/sessions/{sid}/images/{key}", params={"format": "png"})
    assert pixels(Image.open(io.BytesIO(kept.content))) == recorded["stored"]


def check_turn(client: TestClient, sid: str, turn: dict[str, Any]) -> None:
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": turn["action"]}).json()
    assert answer["done"] == turn.get("ended", False), answer
    assert sum(r["meta"].get("reward", 0.0) for r in answer["results"]) == pytest.approx(turn["reward"])
    if turn.get("ended"):
        dropped = turn["dropped_observation"]
        assert answer["observation"] == ([{"role": "user", "content": dropped}] if dropped else [])
        return
    [message] = answer["observation"]
    appended = turn["appended"]
    if isinstance(appended, str):
        assert message == {"role": "user", "content": appended}
        return
    assert len(message["content"]) == len(appended)
    keys = iter(image["key"] for result in answer["results"] for image in result["images"])
    for part, recorded in zip(message["content"], appended, strict=True):
        if "text" in recorded:
            assert part == {"type": "text", "text": recorded["text"]}
        else:
            shown_as(client, sid, part, next(keys), recorded)


@pytest.mark.parametrize("name", slow_cases(RECORDED, {"rotate_large_capped", "zoom_pixels", "side_by_side_capped"}))
def test_a_session_runs_as_the_reference_ran_it(client, name):
    recorded = RECORDED[name]
    inputs, _ = SESSIONS[name]
    assert [pixels(IMAGES[key]()) for key in inputs] == [
        {k: v for k, v in image.items() if k != "key"} for image in recorded["inputs"]]
    sid = start(client, inputs)
    for turn in recorded["turns"]:
        check_turn(client, sid, turn)


@pytest.mark.parametrize("settings_any_store", ["memory", "redis"], indirect=True)
@pytest.mark.parametrize("name", ["chain", "repeat_exact", "repeat_overlap_other_image"])
def test_the_turn_s_state_is_kept_by_either_store(settings_any_store, name):
    with TestClient(create_app(settings_any_store)) as client:
        sid = start(client, SESSIONS[name][0])
        for turn in RECORDED[name]["turns"]:
            check_turn(client, sid, turn)


def test_after_the_forced_final_turn_a_call_is_refused_and_ends_the_episode(client):
    """The reference's 21 model calls end the rollout at the forced final turn; a call after it is refused as a
    call after a repeat is (`force_final_next`)."""
    sid = start(client, ["tiny"])
    for turn in RECORDED["call_limit"]["turns"]:
        check_turn(client, sid, turn)
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": xml(FLIP, axis="vertical", img_idx=0)}).json()
    assert answer["done"] and answer["results"][0]["text"] == NO_MORE_CALLS
    assert answer["observation"] == [{"role": "user", "content": f"<tool_response>\n{NO_MORE_CALLS}\n</tool_response>"}]


def test_the_system_prompt_is_the_task_s():
    """The task's system prompt (the dataset's example row), its tool list written from this profile's schemas:
    the schemas the model is shown are the task's, word for word."""
    assert system_prompt() == GOLDEN["system_prompt"]


def test_tools_answer_through_tool_calls_mcp_style_and_get_observation(client):
    sid = start(client, ["scene"])
    calls = [{"id": "c1", "type": "function", "function": {"name": ZOOM, "arguments": json.dumps(
        {"bbox_2d": [312, 417, 812, 917], "label": "look", "img_idx": 0})}},
             {"id": "c2", "type": "function", "function": {"name": ROTATE, "arguments": json.dumps(
                 {"degrees": 90, "label": "look", "img_idx": 1})}}]
    answer = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": calls}).json()
    first, second = answer["results"]
    recorded = RECORDED["zoom_normalized"]["turns"][0]["appended"]
    assert first["text"] + "\n" == recorded[1]["text"] and first["meta"] == {"reward": 0.02}
    assert json.loads(second["text"])["img_idx"] == 1 and json.loads(second["text"])["new_img_indices"] == [2]
    assert answer["messages"][0]["role"] == "tool"
    tools = client.get("/v1/tools", params={"profile": "nemo-gym"}).json()
    assert tools[0]["function"]["name"] == ZOOM and len(tools) == 10


def test_get_observation_serves_a_trajectory(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", sr_model_dir=tmp_path / "none", verl_tool_profile="nemo-gym")
    with TestClient(create_app(settings)) as client:
        image = "data:image/png;base64," + b64(png_bytes(IMAGES["scene"]()))
        body = {"trajectory_ids": ["t1"], "actions": [xml(ROTATE, degrees=90, label="look", img_idx=0)],
                "extra_fields": [{"images": [image]}]}
        answer = client.post("/get_observation", json=body).json()
        assert answer["dones"] == [False] and answer["valids"] == [True]
        observation = answer["observations"][0]
        assert json.loads(observation["obs"])["size"] == [480, 640]
        assert observation["image"].startswith("data:image/jpeg;base64,")
        body["actions"] = [xml(ROTATE, degrees=90, label="look", img_idx=0)]  # the same call again: a repeat
        repeat = client.post("/get_observation", json=body).json()
        assert repeat["valids"] == [True] and "You already requested" in repeat["observations"][0]["obs"]
        refused = client.post("/get_observation", json=body).json()  # and the call after a repeat is refused
        assert refused == {**refused, "observations": [NO_MORE_CALLS], "dones": [True], "valids": [False]}


def golden_image(name: str, turn: int) -> dict[str, Any]:
    return next(part for part in RECORDED[name]["turns"][turn]["appended"] if "image" in part)


def test_tools_through_mcp(live_server):
    from mcp import Client

    async def main():
        async with Client(f"{live_server.url}/mcp?profile=nemo-gym") as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            await mcp.call_tool("load_image", {"data": b64(png_bytes(IMAGES["scene"]()))})
            zoom = await mcp.call_tool(ZOOM, {"bbox_2d": [312, 417, 812, 917], "label": "look", "img_idx": 0})
            bad = await mcp.call_tool(ZOOM, {"bbox_2d": [1, 2, 3], "label": "look", "img_idx": 0})
            return names, zoom, bad

    names, zoom, bad = asyncio.run(asyncio.wait_for(main(), 60))
    assert names[0] == "load_image" and names[1:] == [t["function"]["name"] for t in
                                                     PROFILES["nemo-gym"].openai_tools()]
    image, text = zoom.content
    recorded = golden_image("zoom_normalized", 0)["image"]
    assert image.mime_type == "image/jpeg" and sha(base64.b64decode(image.data)) == recorded["bytes_sha256"]
    assert text.text + "\n" == RECORDED["zoom_normalized"]["turns"][0]["appended"][1]["text"]
    assert bad.is_error and bad.content[0].text == "image_zoom_in_tool failed: bbox_2d must be a list of four numbers"


def test_tools_through_the_verl_adapter(live_server):
    """verl's agent loop calls each tool once per call; the trajectory keeps one session, so the crop of the zoom's
    result reads the zoom's saved image, as the reference's chain does."""
    from toolserver.integrations.verl import ToolServerTool

    tools = {name: ToolServerTool(config={"type": "native", "url": live_server.url, "profile": "nemo-gym",
                                          "tool": name}, tool_schema=None) for name in (ZOOM, CROP)}
    agent_data = SimpleNamespace(request_id="nemo-1", image_data=[IMAGES["scene"](), IMAGES["other"]()])

    async def call(name: str, args: dict[str, Any]) -> Any:
        instance_id, _ = await tools[name].create(create_kwargs={})
        try:
            return await tools[name].execute(instance_id, args, agent_data=agent_data)
        finally:
            await tools[name].release(instance_id)

    async def main():
        zoom = await call(ZOOM, {"bbox_2d": [100, 100, 600, 500], "label": "z", "img_idx": 0})
        crop = await call(CROP, {"bbox_2d": [0, 0, 500, 500], "label": "c", "img_idx": 2})
        return zoom, crop

    (zoom, _, _), (crop, _, crop_metrics) = asyncio.run(main())
    for response, turn in ((zoom, 0), (crop, 1)):
        assert pixels(response.image[0].convert("RGB")) == {k: golden_image("chain", turn)["image"][k]
                                                            for k in ("size", "mode", "pixels_sha256")}
    assert crop_metrics["ok"] and json.loads(crop.text)["new_img_indices"] == [3]
