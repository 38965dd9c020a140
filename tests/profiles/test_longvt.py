"""LongVT (`longvt`) against what its own MCP server did (EvolvingLMMs-Lab/LongVT @ 08d755b9, recorded by
scripts/goldens/record_longvt.py into tests/data/longvt_golden.json over tests/data/longvt_clip.mp4): every case's
text byte for byte and every frame's size and pixels, through Core (both session stores), `/act` and MCP, where
the profile answers as the server itself does; then the session's video (kept whole, once) and its refusals."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from mcp import Client
from PIL import Image

from tests.conftest import b64
from toolserver.config import Settings
from toolserver.core import Core
from toolserver.models import CreateSessionRequest
from toolserver.profiles.longvt import clip_indices, smart_nframes, smart_resize

DATA = Path(__file__).parents[1] / "data"
GOLDEN = json.loads((DATA / "longvt_golden.json").read_text())
CLIP = (DATA / "longvt_clip.mp4").read_bytes()
KEY = "longvt_clip.mp4"
CASES = GOLDEN["cases"]


def arguments(case: dict, path: str = KEY) -> dict:
    return {k: (path if v == "<clip>" else v) for k, v in case["arguments"].items()}


def digest(image: Image.Image) -> dict:
    rgb = image.convert("RGB")
    return {"size": list(rgb.size), "sha256": hashlib.sha256(np.asarray(rgb).tobytes()).hexdigest()}


def decoded(data: str) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_the_clip_is_the_one_recorded():
    assert hashlib.sha256(CLIP).hexdigest() == GOLDEN["clip_sha256"]
    assert GOLDEN["versions"]["backend"] == "decord"


# -- through Core, both session stores ---------------------------------------------------------------------------
async def run_cases(core: Core, path: str) -> list[str]:
    created = await core.create_session(CreateSessionRequest(profile="longvt", images=[{"data": b64(CLIP),
                                                                                       "key": KEY}]))
    wrong = []
    for case in CASES:
        result = await core.call_tool(created.session_id, "crop_video", arguments(case, path))
        frames = [digest(decoded(image.data)) for image in result.images]
        if (result.text, result.ok, frames) != (case["text"].replace("<clip>", path), not case["is_error"],
                                                 case["frames"]):
            wrong.append(f"{case['arguments']}: {result.text!r} ({len(frames)} frames)")
    return wrong


def test_every_case_as_the_reference_answered_it(settings_any_store: Settings):
    assert asyncio.run(run_cases(Core(settings_any_store), KEY)) == []


def test_a_dataset_path_ending_in_the_key_names_the_video(settings: Settings):
    assert asyncio.run(run_cases(Core(settings), f"/data/videos/{KEY}")) == []


# -- /act (hermes) and MCP ---------------------------------------------------------------------------------------
def test_a_turn_through_act_shows_the_frames_then_the_text(client):
    r = client.post("/v1/sessions", json={"profile": "longvt", "images": [{"data": b64(CLIP), "key": KEY}]})
    sid = r.json()["session_id"]
    case = next(c for c in CASES if c["arguments"].get("start_time") == 2.5)
    call = json.dumps({"name": "crop_video", "arguments": arguments(case)})
    acted = client.post(f"/v1/sessions/{sid}/act", json={"text": f"Look.\n<tool_call>{call}</tool_call>"}).json()
    (message,) = acted["observation"]
    assert message["role"] == "tool"
    parts = message["content"]
    assert [p["type"] for p in parts] == ["image_url"] * 4 + ["text"]
    assert parts[-1]["text"] == case["text"]
    assert [digest(decoded(p["image_url"]["url"].split(",", 1)[1])) for p in parts[:-1]] == case["frames"]
    bad = json.dumps({"name": "crop_video", "arguments": {"video_path": KEY, "start_time": 6, "end_time": 5.5}})
    acted = client.post(f"/v1/sessions/{sid}/act", json={"text": f"<tool_call>{bad}</tool_call>"}).json()
    assert acted["observation"] == [{"role": "tool", "content": (
        "Tool execution failed: Error executing tool crop_video: end_time (5.5) must be greater than start_time "
        "(6.0)")}]


def test_mcp_answers_as_the_reference_server_does(live_server):
    success = next(c for c in CASES if c["arguments"].get("start_time") == 2.5)
    failures = [c for c in CASES if c["is_error"]]

    async def main():
        async with Client(f"{live_server.url}/mcp?profile=longvt") as mcp:
            loaded = await mcp.call_tool("load_image", {"data": b64(CLIP), "key": KEY})
            tools = await mcp.list_tools()
            ok = await mcp.call_tool("crop_video", arguments(success))
            bad = [await mcp.call_tool("crop_video", arguments(c)) for c in failures]
            return loaded, tools, ok, bad

    loaded, tools, ok, bad = asyncio.run(asyncio.wait_for(main(), 120))
    assert not loaded.is_error and "as 120 frames" in loaded.content[0].text
    schema = next(t for t in tools.tools if t.name == "crop_video")
    assert set(schema.input_schema["properties"]) == {"video_path", "start_time", "end_time"}
    # The server's answer is the frames alone (LongVT's VideoTools adds its sentence, as /act shows it).
    assert not ok.is_error and [b.type for b in ok.content] == ["image"] * 4
    assert [digest(decoded(b.data)) for b in ok.content] == success["frames"]
    for case, result in zip(failures, bad, strict=True):
        assert result.is_error, case
        # FastMCP's text, which VideoTools' `_parse_tool_result` finds its error words in and prefixes.
        assert [b.text for b in result.content] == [case["text"].replace("<clip>", KEY)
                                                    .removeprefix("Tool execution failed: ")], case


# -- qwen-vl-utils' arithmetic -----------------------------------------------------------------------------------
def test_smart_resize_and_nframes_as_qwen_vl_utils():
    assert smart_resize(240, 320, 784, 224 * 224) == (168, 252)
    assert smart_resize(1080, 1920, 784, 224 * 224) == (168, 280)  # values from qwen-vl-utils 0.0.11 itself
    assert smart_resize(10, 10, 784, 224 * 224) == (28, 28)
    assert smart_nframes(48, 10.0) == 4  # 4.8 frames at 1 fps, floored to even
    assert smart_nframes(3, 10.0) == 2  # at least 2
    assert smart_nframes(3000, 10.0) == 128  # at most 128
    with pytest.raises(Exception, match=r"nframes should in interval \[2, 1\], but got 0\."):
        smart_nframes(1, 10.0)


def test_the_frames_taken_decords_range_and_torchvisions_fallback():
    assert clip_indices(2.5, 7.25, 120, 10.0) == [25, 41, 56, 72]  # ceil(25), floor(72.5); linspace rounded
    assert clip_indices(0, 12, 120, 10.0) == [round(k * 119 / 11) for k in range(12)]
    assert clip_indices(0.25, 0.3, 120, 10.0) == [2, 3]  # decord's range empty: the frame on screen, then 0.3 s
    assert clip_indices(7.04, 7.16, 120, 10.0) == [70, 71]


# -- the session's video ------------------------------------------------------------------------------------------
def test_the_video_is_kept_whole_once_with_its_rate(client):
    r = client.post("/v1/sessions", json={"profile": "longvt", "images": [{"data": b64(CLIP), "key": KEY}]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["videos"][0]["keys"] == [f"{KEY}_frame_{n}" for n in range(1, 121)]
    assert body["videos"][0]["timestamps_s"][:3] == [0.0, 0.1, 0.2]
    assert body["texts"] == [] and len(body["images"]) == 120
    info = client.get(f"/v1/sessions/{body['session_id']}").json()
    assert f"video:{KEY}" in str(info)


def test_a_video_sampled_on_request_or_without_a_key_is_not_a_croppable_video(client):
    for video in ({"data": b64(CLIP), "key": KEY, "max_frames": 4}, {"data": b64(CLIP)}):
        r = client.post("/v1/sessions", json={"profile": "longvt", "images": [video]})
        sid = r.json()["session_id"]
        res = client.post(f"/v1/sessions/{sid}/tools/crop_video",
                          json={"video_path": KEY, "start_time": 1, "end_time": 2}).json()
        assert not res["ok"]
        assert res["text"] == ("Tool execution failed: Error executing tool crop_video: Video file not found: "
                               f"{KEY}")


def test_a_video_over_the_frame_limit_is_refused_whole(tmp_path):
    from fastapi.testclient import TestClient

    from toolserver.api import create_app

    settings = Settings(data_dir=tmp_path / "data", sr_model_dir=tmp_path / "none", max_video_frames=100)
    with TestClient(create_app(settings)) as small:
        r = small.post("/v1/sessions", json={"profile": "longvt", "images": [{"data": b64(CLIP), "key": KEY}]})
    assert r.status_code == 413
    assert "120 frames" in r.text and "keeps every frame" in r.text
