"""ORS (Open Reward Standard): every profile an environment, through `openreward`'s own client against a live
server: a split's task from a JSONL dataset, the prompt's image, a multi-turn image trajectory whose tool outputs
equal `/act`'s for the same turns and end with the profile's reward, a malformed call answered with the protocol's
error (`ToolCallError`) while another session goes on. CI runs it in .venv-ors (requirements-ors.txt)."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from tests_frameworks.conftest import decode, need, picture, png, running_toolserver

ZOOM = {"bbox_2d": [0.0, 0.0, 0.5, 0.5], "target_image": 1}
ANSWER = "The top left is red, so the answer is \\boxed{red}."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "picture.png").write_bytes(png(picture()))
    row = {"id": "quadrants", "question": "What colour is the top left?", "images": ["picture.png"],
           "ground_truth": "red"}
    (folder / "pixel-reasoner.train.jsonl").write_text(json.dumps(row) + "\n")
    with running_toolserver(tmp_path_factory, ors_tasks=str(folder)) as running:
        yield running


def environment(server, name: str):
    openreward = need("openreward")
    client = openreward.OpenReward(api_key="", base_url=server.url)
    return client, client.environments.get(name, base_url=server.url)


def act(url: str, sid: str, text: str) -> dict[str, Any]:
    return httpx.post(f"{url}/v1/sessions/{sid}/act", json={"text": text}, timeout=60).json()


def act_images(expected: dict[str, Any]) -> list[str]:
    return [part["image_url"]["url"].split(",", 1)[1] for message in expected["observation"]
            for part in (message["content"] if isinstance(message["content"], list) else [])
            if part["type"] == "image_url"]


def test_a_trajectory_through_the_client_equals_act(server):
    client, env = environment(server, "pixel-reasoner")
    assert env.list_splits() == ["train"]
    task = env.list_tasks("train")[0]
    assert task.task_spec == {"split": "train", "index": 0, "id": "quadrants"}
    with env.session(task) as session:
        tools = session.list_tools()
        assert {"crop_image"} <= {tool.name for tool in tools}
        assert session.is_assistant_message_final()
        prompt = session.get_prompt()
        assert decode(prompt[0].data).size == picture().size and prompt[0].mimeType == "image/png"
        assert prompt[-1].text == "What colour is the top left?"
        twin = httpx.post(f"{server.url}/v1/sessions", json={"profile": "pixel-reasoner", "images": [
            {"data": prompt[0].data}]}, timeout=30).json()["session_id"]
        for _ in range(2):  # two zooms, each equal to /act's for the same turn
            output = session.call_tool("crop_image", ZOOM)
            expected = act(server.url, twin, '<tool_call>{"name": "crop_image", "arguments": '
                           + json.dumps(ZOOM) + "}</tool_call>")
            assert output.finished is expected["done"] is False and output.reward == 0.0
            assert [b.data for b in output.blocks if getattr(b, "type", "") == "image"] == act_images(expected)
            assert output.metadata["prompt"] == expected["prompt"]
            assert [r["text"] for r in output.metadata["results"]] == [r["text"] for r in expected["results"]]
        last = session.call_terminal_tool(ANSWER)
        expected = act(server.url, twin, ANSWER)
        assert last.finished is expected["done"] is True
        assert last.metadata["reward"]["terms"]["accuracy"] == 1.0
        scored = httpx.post(f"{server.url}/v1/sessions/{twin}/reward", json={
            "turns": [ANSWER], "ground_truth": "red", "question": "What colour is the top left?"}, timeout=30).json()
        assert last.reward == scored["total"] == last.metadata["reward"]["total"] > 0.0
    client.close()


def test_a_malformed_call_is_the_protocols_error_and_other_sessions_go_on(server):
    openreward = need("openreward")
    client, env = environment(server, "default")
    image = base64.b64encode(png(picture())).decode()
    spec = {"question": "Where is green?", "images": [image]}
    task = openreward.api.environments.types.Task(server_name="default", environment_name="default",
                                                  task_spec=spec, namespace=None)
    with env.session(task) as broken, env.session(task) as other:
        with pytest.raises(openreward.api.environments.types.ToolCallError) as raised:
            broken.call_tool("no_such_tool", {})
        assert raised.value.reason == "not_found"
        output = other.call_tool("zoom_in", {"image": 0, "bbox_2d": [500, 0, 1000, 500]})
        assert output.finished is False and output.reward is None  # the default profile has no reward
        crop = decode(next(b for b in output.blocks if getattr(b, "type", "") == "image").data)
        assert crop.getpixel((crop.width // 2, crop.height // 2)) == (30, 200, 30)
        assert broken.call_tool("zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500]}).finished is False
    client.close()
