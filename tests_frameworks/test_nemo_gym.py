"""NeMo Gym (`nemo-gym`, the version docs/nemo-gym.md names): the resources server in `integrations/nemo_gym/` against
a live toolserver: `gym env test` passes on it (its own tests and the example data's checks); a multi-turn image
trajectory through its tool endpoints equals `/act`'s for the same turns, and its `/verify` reward equals the
session reward for them; a malformed tool request is answered with NeMo Gym's error (422) while another rollout
goes on. CI runs it in .venv-nemogym (requirements-nemogym.txt)."""

from __future__ import annotations

import base64
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import httpx
import pytest

from tests_frameworks.conftest import ROOT, decode, need, picture, png

PACKAGE = ROOT / "integrations" / "nemo_gym"
TURNS = [("image_zoom_in_tool", {"bbox_2d": [0, 0, 500, 500], "label": "top left", "img_idx": 0}),
         ("image_rotate_tool", {"degrees": 90, "img_idx": 1}),
         ("image_flip_tool", {"axis": "horizontal", "img_idx": 0})]
ANSWER = "The top left is red."


@pytest.fixture(scope="module")
def gym_app():
    """The resources server's FastAPI app, built as NeMo Gym builds it, pointed at the live toolserver."""
    need("nemo_gym")
    sys.path.insert(0, str(PACKAGE))
    app = importlib.import_module("resources_servers.toolserver_image_tools.app")
    server_utils = importlib.import_module("nemo_gym.server_utils")
    return app, server_utils


def test_gym_env_test_passes(toolserver, tmp_path):
    need("nemo_gym")
    venvs = tmp_path / "venvs" / "resources_servers" / "toolserver_image_tools"
    venvs.mkdir(parents=True)
    (venvs / ".venv").symlink_to(sys.prefix)  # this environment is the server's: no uv venv of its own
    env = {**os.environ, "TOOLSERVER_URL": toolserver.url, "TOOLSERVER_NEMO_GYM_REQUIRED": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("gym")), "env", "test", "--resources-server", "toolserver_image_tools",
         "+skip_venv_if_present=true", f"+uv_venv_dir={tmp_path / 'venvs'}", "+should_validate_data=true"],
        cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert re.search(r"\b4 passed\b", log) and "skipped" not in log, log[-4000:]  # the live tests ran
    assert "has been successfully validated" in log, log[-4000:]


def rollout_client(gym_app, url: str):
    from fastapi.testclient import TestClient

    app, server_utils = gym_app
    config = app.ToolserverImageToolsConfig(host="127.0.0.1", port=0, entrypoint="", name="toolserver_image_tools",
                                            toolserver_url=url)
    server = app.ToolserverImageToolsServer(config=config, server_client=MagicMock(spec=server_utils.ServerClient))
    return TestClient(server.setup_webserver())


def row() -> dict[str, Any]:
    uri = "data:image/png;base64," + base64.b64encode(png(picture())).decode()
    return {"responses_create_params": {"input": [{"role": "user", "type": "message", "content": [
        {"type": "input_image", "image_url": uri, "detail": "auto"},
        {"type": "input_text", "text": "What colour is the top left?"}]}]}}


def act_images(answer: dict[str, Any]) -> list[str]:
    return [part["image_url"]["url"].split(",", 1)[1] for message in answer["observation"]
            for part in (message["content"] if isinstance(message["content"], list) else [])
            if part["type"] == "image_url"]


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_a_trajectory_through_the_resources_server_equals_act(gym_app, toolserver):
    twin = httpx.post(f"{toolserver.url}/v1/sessions", json={"profile": "nemo-gym", "images": [
        {"data": base64.b64encode(png(picture())).decode()}]}, timeout=30).json()["session_id"]
    output: list[dict[str, Any]] = []
    with rollout_client(gym_app, toolserver.url) as client:
        client.post("/seed_session", json=row()).raise_for_status()
        for n, (name, arguments) in enumerate(TURNS):
            got = client.post(f"/{name}", json=arguments)
            assert got.status_code == 200
            expected = httpx.post(f"{toolserver.url}/v1/sessions/{twin}/act",
                                  json={"text": call_text(name, arguments)}, timeout=60).json()
            (result,) = expected["results"]
            assert got.json()["ok"] is result["ok"] is True and got.json()["text"] == result["text"]
            assert got.json()["meta"] == result["meta"]
            assert [i["data"] for i in got.json()["images"]] == act_images(expected)
            output += [{"type": "function_call", "call_id": f"c{n}", "name": name, "id": f"fc{n}",
                        "arguments": json.dumps(arguments), "status": "completed"},
                       {"type": "function_call_output", "call_id": f"c{n}", "output": got.text}]
        crop = decode(client.post("/image_zoom_in_tool", json={"bbox_2d": [0, 0, 1000, 1000], "label": "all",
                                                               "img_idx": 1}).json()["images"][0]["data"])
        assert crop.getpixel((crop.width // 2, crop.height // 2))[0] > 150  # the red top-left quadrant, zoomed
        httpx.post(f"{toolserver.url}/v1/sessions/{twin}/act", json={"text": call_text(
            "image_zoom_in_tool", {"bbox_2d": [0, 0, 1000, 1000], "label": "all", "img_idx": 1})}, timeout=60)
        output.append({"type": "message", "role": "assistant", "id": "m", "status": "completed",
                       "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]})
        response = {"id": "r", "created_at": 0, "model": "scripted", "object": "response", "output": output,
                    "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}
        verified = client.post("/verify", json={**row(), "response": response, "base_reward": 1.0})
        assert verified.status_code == 200, verified.text
    turns = [call_text(name, arguments) for name, arguments in TURNS] + [ANSWER]
    scored = httpx.post(f"{toolserver.url}/v1/sessions/{twin}/reward", json={
        "turns": turns, "question": "What colour is the top left?", "extra": {"base_reward": 1.0}},
        timeout=30).json()
    assert verified.json()["reward"] == scored["total"] == pytest.approx(1.0 + 4 * 0.02)
    assert verified.json()["reward_terms"] == scored["terms"]


def test_a_malformed_request_is_nemo_gyms_error_and_another_rollout_goes_on(gym_app, toolserver):
    with rollout_client(gym_app, toolserver.url) as broken, rollout_client(gym_app, toolserver.url) as other:
        broken.post("/seed_session", json=row()).raise_for_status()
        other.post("/seed_session", json=row()).raise_for_status()
        bad = broken.post("/image_zoom_in_tool", content=b"{not json", headers={"content-type": "application/json"})
        assert bad.status_code == 422 and "detail" in bad.json()
        zoom = other.post("/image_zoom_in_tool", json={"bbox_2d": [500, 0, 1000, 500], "label": "tr", "img_idx": 0})
        crop = decode(zoom.json()["images"][0]["data"])
        green = crop.getpixel((crop.width // 2, crop.height // 2))
        assert green[1] > 150 and green[0] < 100  # the green top-right quadrant
        again = broken.post("/image_zoom_in_tool", json={"bbox_2d": [0, 500, 500, 1000], "label": "bl", "img_idx": 0})
        assert again.status_code == 200 and again.json()["ok"] is True
