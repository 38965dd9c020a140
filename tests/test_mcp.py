"""The MCP endpoint, driven by the official MCP SDK client against a real server process."""

import asyncio
import base64
import io

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from PIL import Image

from tests.conftest import PHOTOS, gradient, png_bytes, start_server, stop_server


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_tools_images_and_errors(live_server):
    picture = gradient(400, 300)

    async def main():
        async with Client(f"{live_server.url}/mcp?profile=default") as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            loaded = await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(picture)).decode()})
            zoom = await mcp.call_tool("zoom_in", {"image": "original_image", "bbox_2d": [0, 0, 500, 500]})
            bad_box = await mcp.call_tool("zoom_in", {"image": "original_image", "bbox_2d": [600, 0, 100, 500]})
            unknown = await mcp.call_tool("zoom_in", {"image": "nope", "bbox_2d": [0, 0, 10, 10]})
            return names, loaded, zoom, bad_box, unknown

    names, loaded, zoom, bad_box, unknown = run(main())
    assert names[0] == "load_image" and {"zoom_in", "lookback_reuse", "magnify"} <= set(names)
    assert "check_whether_response_word_count_in_range" in names
    assert not loaded.is_error and "`original_image`" in loaded.content[0].text

    assert not zoom.is_error
    assert [block.type for block in zoom.content] == ["image", "text"]  # first-block-only clients get the image
    image_block = zoom.content[0]
    assert image_block.mime_type == "image/png"
    crop = Image.open(io.BytesIO(base64.b64decode(image_block.data)))
    assert crop.tobytes() == picture.convert("RGB").crop((0, 0, 200, 150)).tobytes()

    assert bad_box.is_error and "x1 < x2" in bad_box.content[0].text
    assert unknown.is_error and "Available images" in unknown.content[0].text


def test_one_toolserver_session_per_mcp_session(live_server):
    async def session(path: str):
        async with Client(f"{live_server.url}/mcp?profile=default") as mcp:
            await mcp.call_tool("load_image", {"path": path, "key": "photo"})
            first = await mcp.call_tool("zoom_in", {"image": "photo", "bbox_2d": [0, 0, 1000, 1000]})
            again = await mcp.call_tool("lookback_reuse", {"image": first.content[-1].text.split("`")[3]}) \
                if "`" in first.content[-1].text else None
            return first, again

    async def main():
        return await asyncio.gather(session(str(PHOTOS / "TwoWings.jpg")),
                                    session(str(PHOTOS / "Bridge_by_Sander_Klootwijk.jpg")))

    (wings, wings_again), (bridge, _) = run(main())
    sizes = [Image.open(io.BytesIO(base64.b64decode(r.content[0].data))).size for r in (wings, bridge)]
    assert sizes[0] == Image.open(PHOTOS / "TwoWings.jpg").size
    assert sizes[1] == Image.open(PHOTOS / "Bridge_by_Sander_Klootwijk.jpg").size
    assert wings_again is not None and not wings_again.is_error


def test_profile_from_the_url(live_server):
    async def main():
        async with Client(f"{live_server.url}/mcp?profile=arm-thinker") as mcp:
            return [t.name for t in (await mcp.list_tools()).tools]

    names = run(main())
    # load_image, ARM's zoom, its two document tools, the validators
    assert "zoom_in" not in names and len(names) == 1 + 1 + 2 + 19

    async def unknown():
        async with Client(f"{live_server.url}/mcp?profile=no-such-profile") as mcp:
            try:
                await mcp.list_tools()
            except MCPError as exc:  # a protocol error, not a tool result
                return exc
        return None

    error = run(unknown())
    assert isinstance(error, MCPError) and "no-such-profile" in error.message


def test_a_stateless_client_still_runs_tools_that_need_no_stored_image(live_server):
    """Without session handles (`handles=off`; tests/test_mcp_handles.py has them), a call in a throwaway session."""
    async def main():
        async with Client(f"{live_server.url}/mcp?handles=off", mode="2026-07-28") as mcp:
            check = await mcp.call_tool("check_whether_response_word_count_in_range",
                                        {"response": "three short words", "lower_bound": 3, "upper_bound": 3})
            load = await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(gradient(8, 8))).decode()})
            return check, load

    check, load = run(main())
    assert not check.is_error and check.content[0].text == "Check result: True"
    assert load.is_error and "initialize handshake" in load.content[0].text and "handles=on" in load.content[0].text


def sessions_live(url: str) -> float:
    import httpx

    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("toolserver_sessions_live "):
            return float(line.split()[1])
    raise AssertionError("no toolserver_sessions_live metric")


def test_ending_the_mcp_session_releases_its_toolserver_session(live_server):
    async def main():
        async with Client(f"{live_server.url}/mcp") as mcp:
            await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(gradient(8, 8))).decode()})
            return sessions_live(live_server.url)

    during = run(main())
    assert sessions_live(live_server.url) == during - 1


def test_deepeyes_tools_through_mcp(live_server):
    async def main():
        async with Client(f"{live_server.url}/mcp?profile=deepeyes") as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            await mcp.call_tool("load_image", {"data": base64.b64encode(png_bytes(gradient(300, 200))).decode()})
            zoom = await mcp.call_tool("image_zoom_in_tool", {"bbox_2d": [10, 10, 100, 100]})
            bad = await mcp.call_tool("image_zoom_in_tool", {"bbox_2d": [100, 10, 10, 100]})
            return tools, zoom, bad

    tools, zoom, bad = run(main())
    assert tools["image_zoom_in_tool"].input_schema["required"] == []  # its `bbox` quirk repaired over MCP
    assert not zoom.is_error and [b.type for b in zoom.content] == ["image"]  # the image alone, as DeepEyes returns
    crop = Image.open(io.BytesIO(base64.b64decode(zoom.content[0].data)))
    assert crop.tobytes() == gradient(300, 200).crop((10, 10, 100, 100)).tobytes()
    assert bad.is_error and bad.content[0].text == "Error: ZOOM IN ARGUMENTS ARE INVALID"


def test_every_schema_over_mcp_names_only_properties_it_has(live_server):
    """DeepEyes' verbatim prompt schema requires an undefined `bbox`; over MCP it is repaired (the verbatim form
    stays at /v1/tools), so strict client loaders such as Qwen-Agent's accept the server."""
    from toolserver.profiles import PROFILES

    async def main():
        listed = {}
        for profile in PROFILES:
            async with Client(f"{live_server.url}/mcp?profile={profile}") as mcp:
                listed[profile] = (await mcp.list_tools()).tools
        return listed

    for profile, tools in run(main()).items():
        for tool in tools:
            schema = tool.input_schema
            assert set(schema.get("required", [])) <= set(schema.get("properties", {})), (profile, tool.name)
    verbatim = httpx.get(f"{live_server.url}/v1/tools", params={"profile": "deepeyes"}).json()
    assert verbatim[0]["function"]["parameters"]["required"] == ["bbox"]


def test_a_session_bound_in_the_url_serves_clients_that_reconnect_for_every_call(live_server):
    """Stateless clients open a new MCP session per call; `?session=` keeps their images between calls."""
    made = httpx.post(f"{live_server.url}/v1/sessions", json={}).json()
    url = f"{live_server.url}/mcp?profile=default&session={made['session_id']}"
    picture = Image.new("RGB", (300, 200), (10, 200, 30))
    buf = io.BytesIO()
    picture.save(buf, format="PNG")

    async def one_call(name, arguments):
        async with Client(url) as mcp:  # a fresh MCP session each time
            return await mcp.call_tool(name, arguments)

    loaded = run(one_call("load_image", {"data": base64.b64encode(buf.getvalue()).decode(), "key": "field"}))
    zoom = run(one_call("zoom_in", {"image": "field", "bbox_2d": [0, 0, 500, 500]}))
    assert not loaded.is_error and not zoom.is_error, zoom.content
    assert Image.open(io.BytesIO(base64.b64decode(zoom.content[0].data))).size == (150, 100)
    info = httpx.get(f"{live_server.url}/v1/sessions/{made['session_id']}").json()
    assert [image["key"] for image in info["images"]] == ["field", "observation_1"]  # the caller's session, kept
    unknown = f"{live_server.url}/mcp?profile=default&session=nosuch"

    async def on_unknown():
        async with Client(unknown) as mcp:
            return await mcp.call_tool("zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 500]})

    missing = run(on_unknown())
    assert missing.is_error and "no session nosuch" in missing.content[-1].text


def data_uri(picture: Image.Image) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(picture)).decode()


def test_an_inline_image_serves_a_client_that_reconnects_for_every_call(live_server):
    """No `?session=`, a new MCP session per call: the image travels in the call and is cropped in it."""
    picture = gradient(400, 300)

    async def one_call(name, arguments, **client):
        async with Client(f"{live_server.url}/mcp?profile=default", **client) as mcp:
            return await mcp.call_tool(name, arguments)

    zoom = run(one_call("zoom_in", {"image": data_uri(picture), "bbox_2d": [0, 0, 500, 500]}))
    assert not zoom.is_error, zoom.content
    assert [block.type for block in zoom.content] == ["image", "text", "text"]
    crop = Image.open(io.BytesIO(base64.b64decode(zoom.content[0].data)))
    assert crop.tobytes() == picture.convert("RGB").crop((0, 0, 200, 150)).tobytes()
    assert zoom.content[-1].text == "(Inline images stored as `original_image`.)"

    stateless = run(one_call("rotate", {"image": data_uri(picture), "angle": 90, "expand": True}, mode="2026-07-28"))
    assert not stateless.is_error, stateless.content
    assert Image.open(io.BytesIO(base64.b64decode(stateless.content[0].data))).size == (300, 400)

    broken = run(one_call("zoom_in", {"image": "data:image/png;base64,bm90IGFuIGltYWdl", "bbox_2d": [0, 0, 9, 9]}))
    assert broken.is_error and broken.content[0].text.startswith("Error: ")


def test_inline_images_join_a_kept_session_once_each(live_server):
    made = httpx.post(f"{live_server.url}/v1/sessions", json={}).json()
    url = f"{live_server.url}/mcp?session={made['session_id']}"
    red, blue = data_uri(Image.new("RGB", (64, 48), (200, 0, 0))), data_uri(Image.new("RGB", (64, 48), (0, 0, 200)))

    async def main():
        async with Client(url) as mcp:
            return await mcp.call_tool("select_frames", {"frames": [red, blue, red]})

    result = run(main())
    info = httpx.get(f"{live_server.url}/v1/sessions/{made['session_id']}").json()
    stored = [image["key"] for image in info["images"] if image["origin"] == "input"]
    assert len(stored) == 2, info["images"]  # the red frame, given twice, is stored once
    assert [block.type for block in result.content] == ["image"] * 3 + ["text", "text"], result.content
    assert result.content[-1].text == f"(Inline images stored as `{stored[0]}`, `{stored[1]}`.)"


@pytest.mark.slow
def test_load_image_and_inline_images_by_url(tmp_path):
    """`url` in load_image, and a URL in place of an image key; the server fetches them (private addresses
    allowed here, since the picture is served from loopback)."""
    import http.server
    import threading

    (tmp_path / "field.png").write_bytes(png_bytes(gradient(120, 80)))
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    picture_url = f"http://127.0.0.1:{httpd.server_address[1]}/field.png"
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path / "data"), "TOOLSERVER_URL_ALLOW_PRIVATE": "true",
                           "TOOLSERVER_ALLOW_URL_FETCH": "true"})
    try:
        async def main():
            async with Client(f"{server.url}/mcp") as mcp:
                loaded = await mcp.call_tool("load_image", {"url": picture_url, "key": "field"})
                zoom = await mcp.call_tool("zoom_in", {"image": picture_url, "bbox_2d": [0, 0, 500, 1000]})
                return loaded, zoom

        loaded, zoom = run(main())
    finally:
        stop_server(server)
        httpd.shutdown()
    assert not loaded.is_error and "`field`" in loaded.content[0].text and "120x80" in loaded.content[0].text
    assert not zoom.is_error, zoom.content
    assert Image.open(io.BytesIO(base64.b64decode(zoom.content[0].data))).size == (60, 80)


def test_run_python_over_mcp_with_an_inline_image(live_server):
    picture = gradient(400, 300)

    async def main():
        async with Client(f"{live_server.url}/mcp?profile=default") as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            done = await mcp.call_tool("run_python", {"code": "print(image_1.size)\ndisplay(image_1.crop((0, 0, 40, 30)))",
                                                      "images": [data_uri(picture)]})
            failed = await mcp.call_tool("run_python", {"code": "1/0", "images": []})
            return tools["run_python"], done, failed

    tool, done, failed = run(main())
    assert tool.input_schema["required"] == ["code"]
    assert not done.is_error, done.content
    assert [block.type for block in done.content] == ["image", "text", "text"]
    crop = Image.open(io.BytesIO(base64.b64decode(done.content[0].data)))
    assert crop.tobytes() == picture.convert("RGB").crop((0, 0, 40, 30)).tobytes()
    assert done.content[1].text.startswith("stdout:\n(400, 300)\nThe code showed 1 image: `observation_1`")
    assert failed.is_error and failed.content[0].text.endswith("ZeroDivisionError: division by zero")
