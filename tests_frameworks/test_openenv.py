"""OpenEnv: every profile as an environment, through OpenEnv's own, unmodified clients against a live
server: `GenericEnvClient` episodes whose observations equal `/act`'s for the same turns (texts, prompts, image
sizes), 64 concurrent episodes, bad input answered with OpenEnv's error messages while other episodes go on, and
the production-mode MCP client (`openenv/session/create` ... `openenv/session/close`). CI runs it twice: with
`openenv-core` 0.3 (requirements-openenv.txt) and with `openenv` 0.10 (requirements-openenv10.txt), the package
as it is now published from huggingface/OpenEnv."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests_frameworks.conftest import data_uri, decode, need, picture, running_toolserver, snippet, top_left_crop

MAX_EPISODES = 64
MAX_MESSAGE = 1 << 20
ZOOM = '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'
DEEPEYES_ZOOM = ('<think>look closer</think><tool_call>\n{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": '
                 '[0, 0, 200, 150]}}\n</tool_call><tool_call>\n{"name": "image_rotate_tool", "arguments": '
                 '{"angle": 90}}\n</tool_call>')
# Each profile's turns: a raw model turn (str) or a structured call (dict).
SCRIPTS: dict[str, list[str | dict[str, Any]]] = {
    "default": [ZOOM, {"tool_name": "rotate", "arguments": {"image": "observation_1", "angle": 90}},
                '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [600, 0, 100, 500]}}</tool_call>',
                "The top left corner is red."],
    "deepeyes": [DEEPEYES_ZOOM, "<answer>red</answer>"],
    "pixel-reasoner": ['<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], '
                       '"target_image": 1}}</tool_call>', "The answer is \\boxed{red}."],
    "pyvision-rl": ["Let me look.\n<code>\n```python\nprint('hello')\nx = 41\n```\n</code>",
                    "<code>\n```python\nplt.imshow(image_clue_0)\nplt.axis('off')\nplt.show()\n```\n</code>",
                    "<code>\n```python\nprint(x + 1)\n```\n</code>", "<answer>\\boxed{red}</answer>"],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_toolserver(tmp_path_factory, openenv_max_episodes=str(MAX_EPISODES),
                            openenv_max_message_bytes=str(MAX_MESSAGE)) as running:
        yield running


def shown(messages: list[dict[str, Any]]) -> list[Any]:
    """Messages with each image replaced by its size (the bytes travel as data URLs)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [decode(part["image_url"]["url"]).size if part["type"] == "image_url" else part
                       for part in content]
        out.append({**message, "content": content})
    return out


def rest_twin(url: str, profile: str) -> str:
    body = {"profile": profile, "images": [{"data": data_uri(picture())}]}
    return httpx.post(f"{url}/v1/sessions", json=body, timeout=30).json()["session_id"]


def rest_turn(url: str, sid: str, action: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(action, str):
        return httpx.post(f"{url}/v1/sessions/{sid}/act", json={"text": action}, timeout=60).json()
    result = httpx.post(f"{url}/v1/sessions/{sid}/tools/{action['tool_name']}", json=action["arguments"],
                        timeout=60).json()
    return {"results": [result]}


@pytest.mark.parametrize("profile", list(SCRIPTS))
def test_an_episode_shows_what_act_shows(server, profile):
    openenv = need("openenv.core")
    twin = rest_twin(server.url, profile)
    with openenv.GenericEnvClient(base_url=f"{server.url}/openenv/{profile}").sync() as env:
        reset = env.reset(images=[data_uri(picture())], question="What colour is the top left?", answer="red")
        meta = reset.observation["metadata"]
        assert reset.done is False and reset.reward is None and reset.observation["messages"] == []
        assert meta["profile"] == profile and meta["columns"] == ["question", "answer"]
        assert [(i["width"], i["height"]) for i in meta["images"]] == [picture().size]
        for action in SCRIPTS[profile]:
            step = env.step({"text": action} if isinstance(action, str) else action)
            expected = rest_turn(server.url, twin, action)
            results = step.observation["metadata"]["results"]
            # openenv 0.10's clients read the metadata beside the observation too (0.3's have no such field)
            assert getattr(step, "metadata", step.observation["metadata"]) == step.observation["metadata"]
            assert [r["text"] for r in results] == [r["text"] for r in expected["results"]]
            assert [[(i["width"], i["height"]) for i in r["images"]] for r in results] == \
                [[(i["width"], i["height"]) for i in r["images"]] for r in expected["results"]]
            if isinstance(action, str):  # a raw turn: the same rendering, prompt and end as /act
                assert shown(step.observation["messages"]) == shown(expected["observation"])
                assert step.observation["prompt"] == expected["prompt"] and step.done == expected["done"]
        assert step.done, "the last turn of each script ends the episode by the profile's rule"
        state = env.state()
        assert state["columns"] == {"question": "What colour is the top left?", "answer": "red"}
        assert state["step_count"] == len(SCRIPTS[profile]) and state["session_id"] == meta["session_id"]
    assert wait_for(lambda: httpx.get(f"{server.url}/v1/sessions/{meta['session_id']}").status_code == 404)


def test_the_step_carries_the_reward(server):
    """A reset with a reward spec: OpenEnv's client sees 0.0 on the steps before the end and the profile's reward
    (Pixel-Reasoner's, computed as verl-tool's reward manager computes it) on the step that ends the episode."""
    openenv = need("openenv.core")
    with openenv.GenericEnvClient(base_url=f"{server.url}/openenv/pixel-reasoner").sync() as env:
        reset = env.reset(images=[data_uri(picture())], reward={"ground_truth": "red"})
        assert reset.reward is None
        first = env.step({"text": SCRIPTS["pixel-reasoner"][0]})
        assert first.done is False and first.reward == 0.0
        last = env.step({"text": SCRIPTS["pixel-reasoner"][1]})
        assert last.done is True and last.reward == 1.0
        assert last.observation["metadata"]["reward"]["terms"]["accuracy"] == 1.0


def test_the_readme_episode(server):
    need("openenv.core")
    observations = snippet("openenv_episode", "trainers").run_episode(
        server.url, "default", data_uri(picture()), [ZOOM, "The top left corner is red."])
    image = next(part for part in observations[0]["messages"][0]["content"] if part["type"] == "image_url")
    assert top_left_crop(decode(image["image_url"]["url"]))
    assert len(observations) == 2 and observations[1]["messages"] == []


def episodes_open(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("toolserver_openenv_episodes "):
            return float(line.split()[1])
    raise AssertionError("no toolserver_openenv_episodes metric")


def wait_for(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_64_concurrent_episodes_and_the_65th_is_refused(server):
    openenv = need("openenv.core")
    connect = need("websockets.asyncio.client").connect
    assert wait_for(lambda: episodes_open(server.url) == 0)
    base = f"{server.url}/openenv/default"

    async def episode_start(i: int):
        env = openenv.GenericEnvClient(base_url=base)
        await env.connect()
        result = await env.reset(images=[data_uri(picture())], episode_id=f"e{i}")
        assert result.observation["metadata"]["episode_id"] == f"e{i}"
        return env

    async def episode_steps(env) -> list[Any]:
        zoom = await env.step({"text": ZOOM})
        rotate = await env.step({"tool_name": "rotate", "arguments": {"image": "observation_1", "angle": 90}})
        await env.close()
        return [zoom, rotate]

    async def main():
        envs = await asyncio.gather(*(episode_start(i) for i in range(MAX_EPISODES)))
        assert episodes_open(server.url) == MAX_EPISODES
        async with connect(base.replace("http", "ws") + "/ws") as extra:
            refused = json.loads(await extra.recv())
        return refused, await asyncio.gather(*(episode_steps(env) for env in envs))

    refused, episodes = asyncio.run(asyncio.wait_for(main(), 300))
    assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED"
    assert refused["data"]["active_sessions"] == refused["data"]["max_sessions"] == MAX_EPISODES
    for zoom, rotate in episodes:
        image = zoom.observation["messages"][0]["content"][0]["image_url"]["url"]
        assert top_left_crop(decode(image))
        rotated = rotate.observation["metadata"]["results"][0]
        assert rotated["ok"] and rotated["tool"] == "rotate" and len(rotate.observation["messages"]) == 1
    assert wait_for(lambda: episodes_open(server.url) == 0), "closed episodes give their slots back"


def test_bad_input_is_answered_and_other_episodes_go_on(server):
    openenv = need("openenv.core")
    connect = need("websockets.asyncio.client").connect
    closed_error = need("websockets.exceptions").ConnectionClosedError
    ws_url = server.url.replace("http", "ws") + "/openenv/default/ws"

    async def ask(ws, frame: str | bytes) -> dict[str, Any]:
        await ws.send(frame)
        return json.loads(await ws.recv())

    async def main():
        good = openenv.GenericEnvClient(base_url=f"{server.url}/openenv/default")
        await good.reset(images=[data_uri(picture())])
        answers = {}
        async with connect(ws_url, max_size=None) as hostile:
            answers["not json"] = await ask(hostile, "{bad")
            answers["not utf-8"] = await ask(hostile, b"\xff\xfe")
            answers["deep"] = await ask(hostile, "[" * 100_000 + "]" * 100_000)
            answers["not an object"] = await ask(hostile, "[1, 2]")
            answers["unknown type"] = await ask(hostile, '{"type": "dance"}')
            answers["before reset"] = await ask(hostile, json.dumps({"type": "step", "data": {"text": ZOOM}}))
            answers["huge"] = await ask(hostile, json.dumps({"type": "reset", "data": {"x": "a" * MAX_MESSAGE}}))
            answers["bad image"] = await ask(hostile, json.dumps({"type": "reset", "data": {
                "images": ["data:image/png;base64,AAAA"]}}))
            answers["reset"] = await ask(hostile, json.dumps({"type": "reset", "data": {
                "images": [data_uri(picture())]}}))
            answers["unknown tool"] = await ask(hostile, json.dumps({"type": "step", "data": {"tool_name": "nope"}}))
            answers["both kinds"] = await ask(hostile, json.dumps({"type": "step", "data": {
                "text": ZOOM, "tool_name": "zoom_in"}}))
            answers["still works"] = await ask(hostile, json.dumps({"type": "step", "data": {"text": ZOOM}}))
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):  # the client's own view of an unknown tool
            await good.step({"tool_name": "nope", "arguments": {}})
        async with connect(ws_url, max_size=None) as flooding:  # over the WebSocket layer's own bound
            await flooding.send("x" * (2 * MAX_MESSAGE + 1))
            with pytest.raises(closed_error) as closed:
                await flooding.recv()
        after = await good.step({"text": ZOOM})
        await good.close()
        return answers, closed.value.rcvd.code, after

    answers, close_code, after = asyncio.run(asyncio.wait_for(main(), 120))
    codes = {name: (answer["type"], answer["data"].get("code")) for name, answer in answers.items()}
    assert codes == {"not json": ("error", "INVALID_JSON"), "not utf-8": ("error", "INVALID_JSON"),
                     "deep": ("error", "INVALID_JSON"), "not an object": ("error", "VALIDATION_ERROR"),
                     "unknown type": ("error", "UNKNOWN_TYPE"), "before reset": ("error", "EXECUTION_ERROR"),
                     "huge": ("error", "VALIDATION_ERROR"), "bad image": ("error", "VALIDATION_ERROR"),
                     "reset": ("observation", None), "unknown tool": ("error", "VALIDATION_ERROR"),
                     "both kinds": ("error", "VALIDATION_ERROR"), "still works": ("observation", None)}
    assert answers["unknown type"]["data"]["message"] == "Unknown message type: dance"
    assert answers["unknown tool"]["data"]["message"] == "Invalid message"
    assert answers["unknown tool"]["data"]["errors"][0]["loc"] == ["tool_name"]
    assert answers["huge"]["data"]["message"].startswith("Message too large")
    assert answers["bad image"]["data"]["toolserver_code"] == "invalid_image"
    assert close_code == 1009  # message too big
    assert top_left_crop(decode(after.observation["messages"][0]["content"][0]["image_url"]["url"]))
    assert httpx.get(server.url + "/healthz").status_code == 200


def test_discovery_and_one_shot_routes(server):
    need("openenv.core")
    base = f"{server.url}/openenv/pixel-reasoner"
    schemas = httpx.get(base + "/schema").json()
    assert set(schemas) == {"action", "observation", "state"}
    tool_names = schemas["action"]["properties"]["tool_name"]["anyOf"][0]["enum"]
    assert tool_names == ["crop_image", "select_frames", "zoom_in", "crop_image_normalized"]
    assert httpx.get(base + "/health").json() == {"status": "healthy"}
    assert httpx.get(base + "/metadata").json()["name"] == "pixel-reasoner"
    reset = httpx.post(base + "/reset", json={"images": [data_uri(picture())]}).json()
    assert reset["done"] is False and reset["observation"]["metadata"]["images"][0]["width"] == 400
    assert reset["metadata"] == reset["observation"]["metadata"]  # as openenv 0.10's server sends it
    step = httpx.post(base + "/step", json={"images": [data_uri(picture())], "action": {
        "tool_name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.5, 0.5], "target_image": 1}}}).json()
    assert step["observation"]["prompt"].startswith("Here is the cropped image.")
    assert httpx.post(base + "/step", json={"action": {"tool_name": "nope"}}).status_code == 422
    assert httpx.get(f"{server.url}/openenv/nope/schema").status_code == 404


def test_the_production_mode_mcp_client(server):
    openenv = need("openenv.core")
    from openenv.core.mcp_client import MCPToolClient

    assert openenv is not None

    async def main():
        client = MCPToolClient(base_url=f"{server.url}/openenv/default")
        client.use_production_mode = True  # JSON-RPC over HTTP POST /mcp, with OpenEnv's session methods
        names = [tool.name for tool in await client.list_tools()]
        during = episodes_open(server.url)
        loaded = await client.call_tool("load_image", data=data_uri(picture()))
        zoom = await client.call_tool("zoom_in", image=0, bbox_2d=[0, 0, 500, 500])
        with pytest.raises(RuntimeError, match="Tool not found: nope"):
            await client.call_tool("nope")
        await client.close()
        return names, during, loaded, zoom

    names, during, loaded, zoom = asyncio.run(asyncio.wait_for(main(), 60))
    assert names[0] == "load_image" and "zoom_in" in names and during == 1
    assert not loaded["isError"] and "`original_image`" in loaded["content"][0]["text"]
    assert zoom["content"][0]["type"] == "image" and top_left_crop(decode(zoom["content"][0]["data"]))
    assert wait_for(lambda: episodes_open(server.url) == 0)
