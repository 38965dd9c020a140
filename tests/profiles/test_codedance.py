"""CodeDance (`codedance`) against what its own code did (CodeDance-VL/CodeDance @ 62f8c6f5, recorded by
scripts/goldens/record_codedance.py into tests/data/codedance_golden.json): every session of codedance_sessions.py
through `/act`, turn by turn — `done`, the text its rollout appends byte for byte, each image as its rollout hands
it to the model (size and pixels), the tool's reward — then the tool through `/tool_calls`, MCP, the verl adapter
and verl-tool's `/get_observation`."""

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

from tests.conftest import b64, png_bytes
from tests.profiles.alpha_inputs import png
from tests.profiles.codedance_sessions import RUN, code, input_image
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.profiles.codedance import TURN_LIMIT, CodeDanceFormat, glm_calls, timeout_of

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "codedance_golden.json").read_text())
FILE_SIZE = tuple(GOLDEN["input_files"]["rgb"]["size"])  # input_image.jpg: the row's processed image (252, 196)
RECORDED = {session["name"]: session for session in GOLDEN["sessions"]}
CODEDANCE = CodeDanceFormat()
ALPHA_INPUTS = {"rgba": ("rgba", 301, 203, 2), "la": ("la", 301, 203, 3), "palette": ("palette", 301, 203, 4)}
SLOW = {"glm_timeout_argument", "glm_timeout_with_output", "glm_timeout_swallowed"}


def pixels(image: Image.Image) -> dict[str, Any]:
    return {"size": list(image.size), "mode": image.mode,
            "pixels_sha256": hashlib.sha256(image.tobytes()).hexdigest()}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def start(client: TestClient, with_image: bool) -> str:
    images = [{"data": b64(png_bytes(input_image()))}] if with_image else []
    return client.post("/v1/sessions", json={"profile": "codedance", "images": images}).json()["session_id"]


def check_turn(client: TestClient, sid: str, turn: dict[str, Any]) -> None:
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": turn["action"]}).json()
    assert answer["done"] == turn["done"], answer
    if turn["done"]:
        assert answer["results"] == [] and answer["prompt"] == ""
        return
    assert [call["arguments"] for call in answer["calls"]] == [call["arguments"] for call in turn["calls"]]
    assert answer["prompt"] == "<|im_end|>\n" + turn["appended"] + "<|im_start|>assistant\n"
    assert [r["meta"]["reward"] for r in answer["results"]] == turn["rewards"]
    shown = [part["model_view"] for response in turn["responses"] for part in response if "image" in part]
    images = [image for message in answer["observation"] for part in message["content"]
              if isinstance(message["content"], list) and part["type"] == "image_url" for image in [part]]
    assert len(images) == len(shown)
    for part, recorded in zip(images, shown, strict=True):
        data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
        assert pixels(Image.open(io.BytesIO(data)).convert("RGB")) == recorded


def test_the_input_image_is_the_recorded_one():
    assert pixels(input_image()) == GOLDEN["input_image"]


@pytest.mark.parametrize("name", [name for name in RECORDED if name not in SLOW])
def test_a_session_runs_as_the_reference_ran_it(client, name):
    recorded = RECORDED[name]
    sid = start(client, recorded["with_image"])
    for turn in recorded["turns"]:
        check_turn(client, sid, turn)


@pytest.mark.parametrize("name", sorted(SLOW))
def test_a_cell_past_its_alarm_reads_as_the_reference_s(client, name):
    """The alarm's TimeoutError (the namespace goes with it), and code that swallows it: killed, the framework's
    text, a fresh worker for the next cell."""
    test_a_session_runs_as_the_reference_ran_it(client, name)


def test_the_turn_limit_text_is_the_rollout_s():
    assert GOLDEN["turn_limit"]["text"] == TURN_LIMIT
    assert GOLDEN["turn_limit"]["appended"] == f"<|im_start|>user\n<tool_response>\n{TURN_LIMIT}\n</tool_response>" \
                                               "<|im_end|>\n"


@pytest.mark.parametrize(("text", "calls"), [
    ("<tool_call>execute_python_code\n<arg_key>code</arg_key>\n<arg_value> x = 1 </arg_value>\n"
     "<arg_key>timeout</arg_key><arg_value>2.5</arg_value>\n</tool_call>", [{"code": "x = 1", "timeout": 2.5}]),
    ("<tool_call>execute_python_code\n<arg_key>timeout</arg_key>\n<arg_value>[1, 'a']</arg_value>\n</tool_call>",
     [{"timeout": [1, "a"]}]),
    ("<tool_call>execute_python_code\n<arg_key>timeout</arg_key>\n<arg_value>{1, 2}</arg_value>\n</tool_call>", []),
    ("<tool_call>execute_python_code\n</tool_call><tool_call>nope</tool_call>", []),
    ("<tool_call>other\n</tool_call><tool_call>execute_python_code\n</tool_call>", [{}]),
])
def test_tool_calls_are_read_as_sglang_s_glm_parser_reads_them(text, calls):
    """Beyond the sessions: values read as JSON, then as Python literals (a set cannot be written back as JSON,
    which drops every call of the text, as an unreadable block does)."""
    assert glm_calls(text) == calls
    assert CODEDANCE.parse(text).done == (not calls)


def test_through_tool_calls_and_get_observation(client, tmp_path):
    sid = start(client, True)
    calls = [{"id": "c1", "type": "function", "function": {"name": RUN, "arguments": json.dumps(
        {"code": "print(input_image.size)"})}}]
    answer = client.post(f"/v1/sessions/{sid}/tool_calls", json={"tool_calls": calls}).json()
    assert answer["results"][0]["text"].startswith(f"Code execution successful, output:\n{FILE_SIZE}\nThink")
    settings = Settings(data_dir=tmp_path / "data", sr_model_dir=tmp_path / "none", verl_tool_profile="codedance")
    with TestClient(create_app(settings)) as bridge:
        image = "data:image/png;base64," + b64(png_bytes(input_image()))
        body = {"trajectory_ids": ["t"], "actions": [code("input_image.crop((100, 50, 228, 178))")],
                "extra_fields": [{"images": [image]}]}
        observed = bridge.post("/get_observation", json=body).json()
        assert observed["valids"] == [True] and observed["dones"] == [False]
        recorded = RECORDED["image_expression"]["turns"][0]
        # verl-tool's agent loop puts in the vision tokens itself: the bridge marks images as `<image>`.
        appended = recorded["appended"].replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>")
        assert observed["observations"][0]["obs"] == "<|im_end|>\n" + appended + "<|im_start|>assistant\n"
        data = base64.b64decode(observed["observations"][0]["image"].split(",", 1)[1])
        assert pixels(Image.open(io.BytesIO(data)).convert("RGB")) == recorded["responses"][0][1]["model_view"]


def test_through_mcp_and_the_verl_adapter(live_server):
    from mcp import Client

    from toolserver.integrations.verl import ToolServerTool

    async def mcp_calls():
        async with Client(f"{live_server.url}/mcp?profile=codedance") as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            await mcp.call_tool("load_image", {"data": b64(png_bytes(input_image()))})
            first = await mcp.call_tool(RUN, {"code": "side = input_image.size[0]"})
            second = await mcp.call_tool(RUN, {"code": "print(side // 2)"})
            return names, first, second

    names, first, second = asyncio.run(asyncio.wait_for(mcp_calls(), 120))
    assert names == ["load_image", RUN] and not first.is_error
    assert second.content[-1].text.startswith(f"Code execution successful, output:\n{FILE_SIZE[0] // 2}\n")

    tool = ToolServerTool(config={"type": "native", "url": live_server.url, "profile": "codedance", "tool": RUN},
                          tool_schema=None)
    agent_data = SimpleNamespace(request_id="codedance-1", image_data=[input_image()])

    async def verl_call(source: str) -> Any:
        instance_id, _ = await tool.create(create_kwargs={})
        try:
            return await tool.execute(instance_id, {"code": source}, agent_data=agent_data)
        finally:
            await tool.release(instance_id)

    response, _, metrics = asyncio.run(verl_call("input_image.crop((0, 0, 50, 30))"))
    recorded = RECORDED["image_small_resized"]["turns"][0]["responses"][0][1]["model_view"]
    assert metrics["ok"] and pixels(response.image[0].convert("RGB")) == recorded


@pytest.mark.parametrize("source", ["raise SystemExit(2)", "import os\nos._exit(0)"])
def test_code_that_ends_its_process_reads_as_the_framework_s_timeout(client, source):
    """There the worker process dies and the rollout waits 300 s for the framework's text; here the text comes at
    once, and the next cell starts from a fresh namespace, as after the reference's worker restart."""
    sid = start(client, True)
    client.post(f"/v1/sessions/{sid}/act", json={"text": code("kept = 1")})
    answer = client.post(f"/v1/sessions/{sid}/act", json={"text": code(source)}).json()
    assert answer["results"][0]["text"] == "Code execution timed out." and not answer["done"]
    after = client.post(f"/v1/sessions/{sid}/act", json={"text": code("print('kept' in globals(), input_image.size)")})
    assert after.json()["results"][0]["text"].startswith(f"Code execution successful, output:\nFalse {FILE_SIZE}\n")


def test_the_alarm_s_seconds():
    assert [timeout_of(a) for a in ({}, {"timeout": "3"}, {"timeout": 0}, {"timeout": "x"}, {"timeout": 1e9},
                                    {"timeout": float("nan")})] == [15.0, 3.0, 15.0, 15.0, 300.0, 300.0]


def test_sessions_keep_their_own_namespaces(client):
    first, second = start(client, True), start(client, False)
    client.post(f"/v1/sessions/{first}/act", json={"text": code("mine = 'first'")})
    answer = client.post(f"/v1/sessions/{second}/act", json={"text": code("print('mine' in globals())")}).json()
    assert answer["results"][0]["text"].startswith("Code execution successful, output:\nFalse\n")


READ_BACK = ("import hashlib\nfrom PIL import Image\nim = Image.open('input_image.jpg')\n"
             "print(im.size, im.mode, hashlib.sha256(im.tobytes()).hexdigest())")


@pytest.mark.parametrize("name", list(GOLDEN["input_files"]))
def test_input_image_jpg_is_the_rows_processed_image(client, name):
    """`input_image.jpg` is what the tool's `create` writes for a parquet row (the image's bytes): qwen-vl-utils'
    `fetch_image` of it (RGBA on white, other modes `convert("RGB")`, smart-resized), saved as a JPEG
    (tests/data/codedance_golden.json `input_files`, recorded from `_save_image_in_main_process`)."""
    recorded = GOLDEN["input_files"][name]
    data = png_bytes(input_image()) if name == "rgb" else png(*ALPHA_INPUTS[name])
    assert hashlib.sha256(data).hexdigest() == recorded["png_sha256"]
    sid = client.post("/v1/sessions", json={"profile": "codedance", "images": [{"data": b64(data)}]}).json()[
        "session_id"]
    answer = client.post(f"/v1/sessions/{sid}/tools/execute_python_code", json={"code": READ_BACK}).json()
    assert answer["ok"], answer
    size = f"({recorded['size'][0]}, {recorded['size'][1]})"
    assert answer["text"].startswith(f"Code execution successful, output:\n{size} {recorded['mode']} "
                                     f"{recorded['pixels_sha256']}\n"), answer["text"]
