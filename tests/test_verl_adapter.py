"""The verl adapter against a real server: verl's own BaseTool and YAML loader when verl is installed
(CI runs this file a second time in a venv with verl 0.9.1 and the CPU torch), BaseTool's documented
lifecycle otherwise."""

import asyncio
import io
from pathlib import Path
from types import SimpleNamespace

import yaml
from PIL import Image

from tests.conftest import gradient, photo
from toolserver.integrations import verl as adapter
from toolserver.integrations.verl import ToolServerTool, verl_schema

EXAMPLE = Path(__file__).parent.parent / "examples" / "verl" / "toolserver_tool_config.yaml"




def load_tools(config_path: Path, url: str, tmp_path: Path) -> dict[str, ToolServerTool]:
    """The committed example, pointed at the test server, loaded the way verl loads it."""
    config = yaml.safe_load(config_path.read_text())
    for entry in config["tools"]:
        entry["config"]["url"] = url
    local = tmp_path / "tool_config.yaml"
    local.write_text(yaml.safe_dump(config))
    if adapter.USING_VERL:
        from verl.tools.tool_registry import initialize_tools_from_config

        tools = initialize_tools_from_config(str(local))
    else:
        tools = []
        for entry in yaml.safe_load(local.read_text())["tools"]:
            module, name = entry["class_name"].rsplit(".", 1)
            assert module == "toolserver.integrations.verl" and name == "ToolServerTool"
            tools.append(ToolServerTool(config=entry["config"], tool_schema=None))
    return {tool.name: tool for tool in tools}


def test_runs_against_the_right_base_class():
    if adapter.USING_VERL:
        from verl.tools.base_tool import BaseTool

        assert issubclass(ToolServerTool, BaseTool)
    else:
        assert ToolServerTool.__mro__[1].__module__ == "toolserver.integrations.verl"
    print(f"verl adapter tested against {'verl' if adapter.USING_VERL else 'the documented signatures'}")


def test_schema_from_the_server_keeps_what_verl_drops_in_words(live_server, tmp_path):
    tools = load_tools(EXAMPLE, live_server.url, tmp_path)
    assert set(tools) == {"zoom_in", "keypoint_zoom", "lookback_reuse"}
    schema = tools["zoom_in"].get_openai_tool_schema()
    function = schema.function if adapter.USING_VERL else SimpleNamespace(**schema.function)
    parameters = function.parameters if adapter.USING_VERL else SimpleNamespace(**function.parameters)
    assert function.name == "zoom_in" and "bbox_2d" in parameters.required
    bbox = parameters.properties["bbox_2d"]
    bbox = bbox if isinstance(bbox, dict) else bbox.model_dump()
    assert bbox["type"] == "array" and "(a list of exactly 4 numbers)" in bbox["description"]
    image = parameters.properties["image"]
    image = image if isinstance(image, dict) else image.model_dump()
    assert image["type"] == ["string", "integer"]


def test_an_alias_gets_its_tools_schema_under_its_own_name(live_server):
    tool = ToolServerTool(config={"url": live_server.url, "profile": "pixel-reasoner", "tool": "zoom_in"},
                          tool_schema=None)
    schema = tool.get_openai_tool_schema()
    function = schema.function if adapter.USING_VERL else SimpleNamespace(**schema.function)
    assert function.name == "zoom_in"  # crop_image's schema, named as the model calls it
    assert function.description == "Zoom in on the image based on the bounding box coordinates."


def test_agent_loop_lifecycle_shares_one_session_per_trajectory(live_server, tmp_path):
    tools = load_tools(EXAMPLE, live_server.url, tmp_path)
    wings = Image.open(photo("TwoWings.jpg")).convert("RGB")

    async def call(tool: ToolServerTool, args: dict, agent_data) -> tuple:
        # What verl's ToolAgentLoop._call_tool does for every single call.
        instance_id, _ = await tool.create(create_kwargs={})
        try:
            return await tool.execute(instance_id, args, agent_data=agent_data)
        finally:
            await tool.release(instance_id)

    async def trajectory(request_id: str, image: Image.Image):
        agent_data = SimpleNamespace(request_id=request_id, image_data=[image])
        zoom = await call(tools["zoom_in"], {"image": "original_image", "bbox_2d": [0, 0, 500, 500]}, agent_data)
        key = zoom[2]["output_key"] if "output_key" in zoom[2] else zoom[0].text.split("`")[3]
        back = await call(tools["lookback_reuse"], {"image": key}, agent_data)
        bad = await call(tools["zoom_in"], {"image": "original_image", "bbox_2d": [900, 0, 100, 10]}, agent_data)
        return zoom, back, bad

    async def main():
        return await asyncio.gather(trajectory("traj-a", wings), trajectory("traj-b", gradient(300, 200)))

    (zoom_a, back_a, bad_a), (zoom_b, _, _) = asyncio.run(main())
    response, reward, metrics = zoom_a
    assert metrics["ok"] and reward == 0.0
    assert len(response.image) == 1 and isinstance(response.image[0], Image.Image)
    w, h = wings.size
    assert response.image[0].tobytes() == wings.crop((0, 0, round(w / 2), round(h / 2))).tobytes()
    assert zoom_b[0].image[0].size == (150, 100)
    assert back_a[2]["ok"], back_a[0].text
    assert back_a[2]["session_id"] == metrics["session_id"]  # same trajectory, same session
    assert zoom_b[2]["session_id"] != metrics["session_id"]
    bad_response, bad_reward, bad_metrics = bad_a
    assert not bad_metrics["ok"] and bad_reward == -0.05 and "x1 < x2" in bad_response.text
    assert bad_response.image is None


def test_instance_scoped_session_without_agent_data(live_server):
    tool = ToolServerTool(config={"type": "native", "url": live_server.url, "tool": "zoom_in"}, tool_schema=None)
    picture = gradient(200, 100)
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")

    async def main():
        instance_id, _ = await tool.create(image=buffer.getvalue())
        first = await tool.execute(instance_id, {"image": 0, "bbox_2d": [0, 0, 1000, 1000]})
        failed = await tool.execute(instance_id, {"image": 5, "bbox_2d": [0, 0, 1000, 1000]})
        reward = await tool.calc_reward(instance_id)
        await tool.release(instance_id)
        return first, failed, reward

    first, failed, reward = asyncio.run(main())
    assert first[0].image[0].tobytes() == picture.convert("RGB").tobytes()
    assert not failed[2]["ok"] and reward == 0.0  # invalid_call_reward defaults to 0


def test_verl_schema_conversion_is_total():
    entry = {"type": "function", "function": {"name": "t", "description": "d", "parameters": {
        "type": "object", "required": ["a"], "properties": {
            "a": {"type": "integer", "minimum": 1, "maximum": 9, "description": "count"},
            "b": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "c": {"type": "string", "enum": ["x", "y"]}}}}}
    schema = verl_schema(entry).model_dump()
    props = schema["function"]["parameters"]["properties"]
    assert props["a"] == {"type": "integer", "description": "count (>= 1, <= 9)", "enum": None} or \
        props["a"]["description"] == "count (>= 1, <= 9)"
    assert props["b"]["type"] == ["string", "null"] or props["b"]["type"] == "string"
    assert props["c"]["enum"] == ["x", "y"]
