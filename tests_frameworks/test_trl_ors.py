"""TRL's own ORS adapter (`trl.experimental.openreward`, trl 1.16) against a live server: its environment factory
binds the profile's tools as methods, and a rollout through them shows `/act`'s texts and ends with the profile's
reward. TRL 1.16's adapter reads neither `terminal_tool` nor image blocks: the server lists the terminal tool among
the tools (`ors_terminal_in_tools`), and the adapter's model sees the text of each output only. CI runs it in
.venv-ors, with trl installed without its dependencies (the adapter needs `openreward` only; no torch)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests_frameworks.conftest import data_uri, need, picture, png, running_toolserver

ANSWER = "The top left is red, so the answer is \\boxed{red}."


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "picture.png").write_bytes(png(picture()))
    row = {"question": "What colour is the top left?", "images": ["picture.png"], "ground_truth": "red"}
    (folder / "pixel-reasoner.train.jsonl").write_text(json.dumps(row) + "\n")
    with running_toolserver(tmp_path_factory, ors_tasks=str(folder), ors_terminal_in_tools="true") as running:
        yield running


def test_trls_adapter_runs_a_rollout_to_its_reward(server, monkeypatch):
    openreward_trl = need("trl.experimental.openreward")
    monkeypatch.setenv("OPENREWARD_SESSION_URL", server.url)  # the SDK's sessions host (default: a subdomain)
    spec = openreward_trl.OpenRewardSpec(server.url, env_name="pixel-reasoner", discover_task_tools=False)
    env = spec.environment_factory()
    assert callable(env.crop_image) and callable(env.final_answer)
    assert env.reset(task_index=0) == "What colour is the top left?"
    twin = httpx.post(f"{server.url}/v1/sessions", json={"profile": "pixel-reasoner", "images": [
        {"data": data_uri(picture())}]}, timeout=30).json()["session_id"]
    text = env.crop_image(bbox_2d=[0.0, 0.0, 0.5, 0.5], target_image=1)
    expected = httpx.post(f"{server.url}/v1/sessions/{twin}/act", json={"text": (
        '<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.0, 0.0, 0.5, 0.5], "target_image": 1}}'
        "</tool_call>")}, timeout=60).json()
    shown = "".join(part["text"] for message in expected["observation"] for part in (
        message["content"] if isinstance(message["content"], list) else [{"type": "text", "text": message[
            "content"]}]) if part["type"] == "text")
    assert text == shown and env.rewards == [0.0] and env.finished is False
    env.final_answer(message=ANSWER)
    assert env.finished is True and env.reward is not None and env.reward > 0.0
    assert env.metadata[-1]["reward"]["terms"]["accuracy"] == 1.0
    assert spec.reward_funcs([env]) == [env.reward]
    env._close()
