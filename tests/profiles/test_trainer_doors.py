"""Mini-o3, Chain-of-Focus and VisionThink through the doors trainers use besides /act: MCP, verl-tool's
`/get_observation` (views uploaded, `<image>` in the observation, its agent loop putting in its own tokens) and the
verl adapter (a verl `BaseTool` per tool, against a real server)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from types import SimpleNamespace

from fastapi.testclient import TestClient
from mcp import Client
from PIL import Image

from tests.conftest import png_bytes
from tests.profiles.test_pyvision_rl import golden_image
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.integrations.verl import ToolServerTool
from toolserver.profiles.chain_of_focus import USER_PROMPT
from toolserver.profiles.visionthink import first_view

IMAGE = golden_image(600, 450, 1)
DATA_URL = "data:image/png;base64," + base64.b64encode(png_bytes(IMAGE)).decode()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_the_three_through_mcp(live_server):
    async def main(profile: str, tool: str, arguments: dict):
        async with Client(f"{live_server.url}/mcp?profile={profile}") as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(IMAGE)).decode()})
            return names, await mcp.call_tool(tool, arguments)

    names, grounding = run(main("mini-o3", "grounding", {"bbox_2d": [0, 0, 0.5, 0.5], "source": "original_image"}))
    assert "grounding" in names and not grounding.is_error
    image = next(block for block in grounding.content if block.type == "image")
    assert Image.open(io.BytesIO(base64.b64decode(image.data))).size == (300, 225)  # 0-1 of 600x450
    names, zoom = run(main("chain-of-focus", "image_zoom_in_tool", {"bbox_2d": [100, 100, 300, 250]}))
    assert "image_zoom_in_tool" in names and not zoom.is_error
    _, resized = run(main("visionthink", "resize_image", {"action": "resize"}))
    image = next(block for block in resized.content if block.type == "image")
    assert Image.open(io.BytesIO(base64.b64decode(image.data))).size == (600, 450)  # 600x450 halved (300x225), then x2


def test_the_three_through_verl_tool_s_get_observation(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", sr_model_dir=tmp_path / "none")
    turns = {
        "mini-o3": '<grounding>{"bbox_2d": [0.1, 0.1, 0.6, 0.6], "source": "original_image"}</grounding>',
        "chain-of-focus": '<tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 10, 200, '
                          '150]}}\n</tool_call>',
        "visionthink": '<tool_call>\n{"name": "resize_image", "arguments": {"action": "resize"}}\n</tool_call>',
    }
    view = first_view(IMAGE)
    views = {"visionthink": "data:image/png;base64," + base64.b64encode(png_bytes(view)).decode()}
    with TestClient(create_app(settings)) as client:
        for profile, action in turns.items():
            body = {"trajectory_ids": [f"t-{profile}"], "actions": [action],
                    "extra_fields": [{"images": [views.get(profile, DATA_URL)]}]}
            got = client.post(f"/verl-tool/{profile}/get_observation", json=body).json()
            assert got["valids"] == [True] and got["dones"] == [False], (profile, got)
            observation = got["observations"][0]
            assert observation["obs"].count("<image>") == 1 and "<|image_pad|>" not in observation["obs"]
            assert observation["image"].startswith("data:image/png;base64,")
            if profile == "visionthink":  # a view has no original: the last image doubled
                shown = Image.open(io.BytesIO(base64.b64decode(observation["image"].split(",", 1)[1])))
                assert shown.size == (view.width * 2, view.height * 2)
            done = client.post(f"/verl-tool/{profile}/get_observation", json={
                "trajectory_ids": [f"t-{profile}"], "actions": ["<answer>A</answer>"],
                "extra_fields": [{"images": [DATA_URL]}]}).json()
            assert done["valids"] == [False] and done["dones"] == [False]  # verl-tool's own 'no tool' answer
            assert done["observations"][0]["invalid_reason"] == "No valid tool found for action"


def test_the_three_through_the_verl_adapter(live_server):
    async def call(profile: str, tool: str, arguments: dict):
        adapter = ToolServerTool(config={"url": live_server.url, "profile": profile, "tool": tool}, tool_schema=None)
        instance_id, _ = await adapter.create(create_kwargs={})
        agent_data = SimpleNamespace(request_id=f"r-{profile}", image_data=[IMAGE])
        try:
            return await adapter.execute(instance_id, arguments, agent_data=agent_data)
        finally:
            await adapter.release(instance_id)

    response, reward, metrics = run(call("chain-of-focus", "image_zoom_in_tool", {"bbox_2d": [100, 100, 300, 250]}))
    assert metrics["ok"] and reward == 0.0 and response.text == USER_PROMPT and len(response.image) == 1
    response, _, metrics = run(call("mini-o3", "grounding", {"bbox_2d": [0.5, 0.5, 0.9, 0.9], "source": "observation_4"}))
    assert not metrics["ok"] and response.text.startswith('ERROR occurs during grounding. Error Information: Error in '
                                                          'predicting the source observation: "observation_4".')
    response, _, metrics = run(call("visionthink", "resize_image", {"action": "resize"}))
    assert metrics["ok"] and response.image[0].size == (600, 450) and json.dumps(response.text)
