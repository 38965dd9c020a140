"""The resources server against a live toolserver at `TOOLSERVER_URL` (tests_frameworks/test_nemo_gym.py starts one
and runs `gym env test` with it). Without it the live tests skip, unless `TOOLSERVER_NEMO_GYM_REQUIRED=1` (CI)."""

import base64
import io
import json
import os
from pathlib import Path
from unittest.mock import MagicMock

import pytest
from fastapi.testclient import TestClient
from nemo_gym.server_utils import ServerClient
from PIL import Image
from resources_servers.toolserver_image_tools.app import (
    ToolserverImageToolsConfig,
    ToolserverImageToolsServer,
    input_images,
    question_of,
    rollout_turns,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


@pytest.fixture
def client():
    url = os.environ.get("TOOLSERVER_URL")
    if not url:
        if os.environ.get("TOOLSERVER_NEMO_GYM_REQUIRED") == "1":
            pytest.fail("TOOLSERVER_URL is not set: these tests need a live toolserver")
        pytest.skip("set TOOLSERVER_URL to a live toolserver")
    config = ToolserverImageToolsConfig(host="127.0.0.1", port=0, entrypoint="", name="toolserver_image_tools",
                                        toolserver_url=url)
    server = ToolserverImageToolsServer(config=config, server_client=MagicMock(spec=ServerClient))
    with TestClient(server.setup_webserver()) as test_client:
        yield test_client


def test_the_rows_images_question_and_turns_are_read():
    row = rows("example.jsonl")[0]
    params = row["responses_create_params"]
    (image,) = input_images(params)
    assert image.data.startswith("data:image/jpeg;base64,") and image.url is None
    assert question_of(params) == "How many black spots can you count on the ladybird's back?"
    output = rows("example_rollouts.jsonl")[0]["response"]["output"]
    decision, answer = rollout_turns(output)
    call = json.loads(decision.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    assert call["name"] == "image_zoom_in_tool" and call["arguments"]["bbox_2d"] == [340, 300, 690, 700]
    assert answer.startswith("Zoomed in")


def test_an_episode_runs_its_tools_and_is_verified(client):
    row = rows("example.jsonl")[0]
    client.post("/seed_session", json=row).raise_for_status()
    arguments = {"bbox_2d": [340, 300, 690, 700], "label": "the detail", "img_idx": 0}
    result = client.post("/image_zoom_in_tool", json=arguments)
    assert result.status_code == 200 and result.json()["ok"] is True
    assert json.loads(result.json()["text"])["new_img_indices"] == [1]
    crop = Image.open(io.BytesIO(base64.b64decode(result.json()["images"][0]["data"])))
    assert crop.size == tuple(json.loads(result.json()["text"])["size"])
    unknown = client.post("/no_such_tool", json={})  # a tool-level failure: a result the model reads
    assert unknown.status_code == 200 and unknown.json()["ok"] is False and unknown.json()["text"]
    malformed = client.post("/image_zoom_in_tool", content=b"{not json", headers={"content-type": "application/json"})
    assert malformed.status_code == 422
    rollout = rows("example_rollouts.jsonl")[0]
    verified = client.post("/verify", json={**row, "response": rollout["response"]})
    assert verified.status_code == 200
    assert verified.json()["reward"] == 1.0 and verified.json()["reward_terms"] == {"pivot": 1.0}
    assert verified.json()["reward_details"]["argument_score"] >= 0.5


def test_a_tool_call_before_seed_session_is_refused(client):
    refused = client.post("/image_zoom_in_tool", json={"bbox_2d": [0, 0, 500, 500], "label": "x", "img_idx": 0})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "no_session"


def test_an_image_toolserver_refuses_is_its_error(client):
    row = rows("example.jsonl")[0]
    row["responses_create_params"]["input"][1]["content"][0]["image_url"] = "data:image/png;base64,bm90IGFuIGltYWdl"
    refused = client.post("/seed_session", json=row)
    assert 400 <= refused.status_code < 500 and refused.json()["error"]["message"]
