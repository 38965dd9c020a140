"""Environments as plugins: the example plugin (examples/plugin), made installed for a real server process by a
distribution folder on its path built from the plugin's own pyproject.toml, works end to end with no edit under
toolserver/: tools, profiles, `/act` with its format named, MCP, the verl adapter, the trajectory export. A plugin
that fails to load stops `serve` with a message naming it; a profile with a typo fails at import."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import shutil
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from mcp import Client
from PIL import Image

from tests.conftest import gradient, png_bytes, start_server, stop_server
from tests.profiles.helpers import act_image
from toolserver.integrations.verl import ToolServerTool
from toolserver.plugins import forget_plugins, load_plugins
from toolserver.profiles import PROFILES, Profile, ProfileError
from toolserver.tools.zoom_in import ZoomIn

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "plugin"


def install_on_path(site: Path, module: str, distribution: str, entry_points: dict[str, str]) -> Path:
    """What pip leaves behind, made by hand: the module and a .dist-info whose entry_points.txt names it."""
    site.mkdir(parents=True, exist_ok=True)
    info = site / f"{distribution.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1.0\n")
    lines = [f"{name} = {value}" for name, value in entry_points.items()]
    (info / "entry_points.txt").write_text("[toolserver.environments]\n" + "\n".join(lines) + "\n")
    return site


@pytest.fixture(scope="module")
def grid_site(tmp_path_factory) -> Path:
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    site = tmp_path_factory.mktemp("site")
    shutil.copy(PLUGIN / "toolserver_grid.py", site / "toolserver_grid.py")
    return install_on_path(site, "toolserver_grid", project["name"],
                           project["entry-points"]["toolserver.environments"])


@pytest.fixture(scope="module")
def grid_server(grid_site, tmp_path_factory):
    path = os.pathsep.join([str(grid_site), *filter(None, [os.environ.get("PYTHONPATH")])])
    server = start_server({"PYTHONPATH": path, "TOOLSERVER_DATA_DIR": str(tmp_path_factory.mktemp("grid"))})
    yield server
    stop_server(server)


def test_the_plugin_is_listed_with_where_it_came_from(grid_server):
    profiles = {p["name"]: p for p in httpx.get(f"{grid_server.url}/v1/profiles").json()}
    assert profiles["grid"]["tools"] == ["zoom_cell"] and profiles["grid"]["call_format"] == "grid"
    assert profiles["grid"]["source"].startswith("plugin toolserver-grid 0.1.0")
    assert profiles["default"]["source"] == "builtin"
    tools = httpx.get(f"{grid_server.url}/v1/tools", params={"profile": "grid"}).json()
    assert [t["function"]["name"] for t in tools] == ["zoom_cell"]
    assert tools[0]["function"]["parameters"]["required"] == ["cell"]
    enum = httpx.get(f"{grid_server.url}/openapi.json").json()["components"]["schemas"]["ActRequest"]
    assert enum["properties"]["format"]["enum"][-1] == "grid"


def test_act_with_the_plugin_format_named_and_the_trajectory(grid_server):
    picture = gradient(300, 210)
    with httpx.Client(base_url=grid_server.url, timeout=30) as c:
        sid = c.post("/v1/sessions", json={"profile": "grid", "images": [
            {"data": base64.b64encode(png_bytes(picture)).decode()}]}).json()["session_id"]
        acted = c.post(f"/v1/sessions/{sid}/act", json={
            "format": "grid", "text": "<zoom_cell>B2</zoom_cell> and <zoom_cell>c3</zoom_cell> <zoom_cell>A1</zoom_cell>"
        }).json()
        unknown = c.post(f"/v1/sessions/{sid}/act", json={"format": "gird", "text": "x"})
        trajectory = c.get(f"/v1/sessions/{sid}/trajectory").json()
    assert acted["format"] == "grid" and [call["name"] for call in acted["calls"]] == ["zoom_cell"] * 2
    centre = acted["results"][0]
    assert centre["ok"] and centre["meta"]["box_original"] == [100, 70, 200, 140]
    assert centre["images"][0]["data"] is None  # carried once, in the observation
    image = act_image(acted)
    assert image.size == (200, 140)
    assert image.tobytes() == picture.convert("RGB").crop((100, 70, 200, 140)).resize(
        (200, 140), Image.Resampling.BICUBIC).tobytes()
    assert acted["observation"][1]["content"][0]["text"].startswith("Cell C3 of `original_image`")
    assert unknown.status_code == 422 and "gird" in unknown.json()["detail"]
    assert [(call["tool"], call["keys"]) for call in trajectory["calls"]] == [
        ("zoom_cell", ["observation_1"]), ("zoom_cell", ["observation_2"])]


def test_the_plugin_over_mcp_and_the_verl_adapter(grid_server):
    picture = gradient(90, 60)

    async def mcp():
        async with Client(f"{grid_server.url}/mcp?profile=grid") as session:
            names = [t.name for t in (await session.list_tools()).tools]
            await session.call_tool("load_image", {"data": base64.b64encode(png_bytes(picture)).decode()})
            return names, await session.call_tool("zoom_cell", {"cell": "A1"})

    names, zoomed = asyncio.run(asyncio.wait_for(mcp(), 60))
    assert names == ["load_image", "zoom_cell"] and not zoomed.is_error
    assert Image.open(io.BytesIO(base64.b64decode(zoomed.content[0].data))).size == (60, 40)

    tool = ToolServerTool(config={"url": grid_server.url, "profile": "grid", "tool": "zoom_cell"}, tool_schema=None)

    async def verl():
        instance_id, _ = await tool.create(create_kwargs={})
        try:
            agent_data = SimpleNamespace(request_id="grid-1", image_data=[picture])
            return await tool.execute(instance_id, {"cell": "C1"}, agent_data=agent_data)
        finally:
            await tool.release(instance_id)
            await tool.release_trajectory("grid-1")

    response, _, _ = asyncio.run(verl())
    assert response.text.startswith("Cell C1") and response.image[0].size == (60, 40)


@pytest.mark.slow
def test_a_broken_plugin_stops_serve_naming_it(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken_env.py").write_text("raise ImportError('needs a library that is not installed')\n")
    install_on_path(site, "broken_env", "broken-env", {"broken": "broken_env:ENVIRONMENT"})
    with pytest.raises(RuntimeError) as exc:
        start_server({"PYTHONPATH": str(site), "TOOLSERVER_DATA_DIR": str(tmp_path / "data")}, timeout=60)
    assert "toolserver plugin 'broken'" in str(exc.value) and "broken-env 0.1.0" in str(exc.value)
    assert "needs a library that is not installed" in str(exc.value)


def test_in_process_loading_registers_and_forgets(grid_site, monkeypatch):
    monkeypatch.syspath_prepend(str(grid_site))
    try:
        loaded = load_plugins()
        assert any(name.startswith("grid = ") for name in loaded)
        assert "grid" in PROFILES and load_plugins() == loaded  # loaded once
    finally:
        forget_plugins()
        sys.modules.pop("toolserver_grid", None)
    assert "grid" not in PROFILES


@pytest.mark.parametrize(("field", "value", "words"), [
    ("call_format", "hermse", "call_format 'hermse' is not a registered format"),
    ("arguments", "strcit", "arguments 'strcit' is not one of"),
    ("alpha", "whte", "alpha 'whte' is not one of"),
    ("coords", "rel100", "coords 'rel100' is not one of"),
    ("aliases", {"zoom": "zoom_inn"}, "alias 'zoom' points to 'zoom_inn'"),
])
def test_a_typo_in_a_profile_fails_at_definition(field, value, words):
    with pytest.raises(ProfileError, match="profile 'typo'") as exc:
        Profile("typo", "a profile with a typo", {"zoom_in": ZoomIn()}, **{field: value})
    assert words in str(exc.value)
