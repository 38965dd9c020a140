"""verifiers v1 (Prime Intellect's environment library): the taskset package `integrations/verifiers_toolserver`,
loaded by verifiers' own loader, run by verifiers' own rollout (its `null` harness, its interception server, its
task-scoped tool server) against a live toolserver. The policy is a scripted OpenAI-compatible endpoint in this test
(verifiers needs a model endpoint; the script plays the model's turns, nothing in the product answers for it): a
whole multi-turn image trajectory whose tool results equal `/act`'s for the same turns, scored by toolserver's
reward for the profile; a malformed call answered with MCP's error while another rollout goes on. CI runs it in
.venv-verifiers (requirements-verifiers.txt)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests_frameworks.conftest import decode, need, picture, png, running_toolserver, snippet

ZOOM = {"bbox_2d": [0.0, 0.0, 0.5, 0.5], "target_image": 1}
CROP = '<tool_call>{"name": "crop_image", "arguments": ' + json.dumps(ZOOM) + "}</tool_call>"  # the same, to /act
MALFORMED = {"bbox_2d": "not a box", "target_image": 1}
ANSWER = "The top left is red, so the answer is \\boxed{red}."
QUESTION = "What colour is the top left?"


class ScriptedModel:
    """An OpenAI-compatible chat endpoint that answers each conversation with the next turn of its script (a tool
    call or a final text), keyed by the number of assistant turns the conversation already holds; it keeps every
    request it was sent, so the test can read the tool results the model was shown."""

    def __init__(self, script: dict[str, list[dict[str, Any]]]):
        self.script, self.requests = script, []  # script: a turn list per question
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        messages = body["messages"]
        first = next(m for m in messages if m["role"] == "user")
        text = first["content"] if isinstance(first["content"], str) else " ".join(
            p.get("text", "") for p in first["content"])
        turns = next(turns for question, turns in self.script.items() if question in text)
        return turns[sum(m["role"] == "assistant" for m in messages)]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                turn = model.reply(body)
                calls = [{"index": i, "id": f"call_{len(model.requests)}_{i}", "type": "function",
                          "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                         for i, c in enumerate(turn.get("calls", []))]
                delta = {"role": "assistant", "content": turn.get("text"), **({"tool_calls": calls} if calls else {})}
                base = {"id": "scripted", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
                events = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                          {**base, "choices": [{"index": 0, "delta": {},
                                                "finish_reason": "tool_calls" if calls else "stop"}]},
                          {**base, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                            "total_tokens": 2}}]
                payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload.encode())))
                self.end_headers()
                self.wfile.write(payload.encode())

        return Handler

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    with running_toolserver(tmp_path_factory) as running:
        yield running


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("dataset")
    (folder / "picture.png").write_bytes(png(picture()))
    rows = [{"id": "quadrants", "question": QUESTION, "images": ["picture.png"], "ground_truth": "red"},
            {"id": "green", "question": "Where is green?", "images": ["picture.png"], "ground_truth": "top right"}]
    (folder / "pixel-reasoner.train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder)


def taskset(server, dataset: str, profile: str = "pixel-reasoner"):
    """The taskset as verifiers loads it for `vf-eval` and its env server: `load_environment` over an env config
    naming the taskset package by its id."""
    need("verifiers")
    from verifiers.v1.utils.loaders import load_environment, resolve_env_config

    env = load_environment(resolve_env_config({"taskset": {
        "id": "verifiers-toolserver", "dataset": dataset, "task": {"toolserver": server.url, "profile": profile}}}))
    assert type(env).__name__ == "SingleAgentEnv"
    return env.taskset


def use_uv() -> None:
    """verifiers runs its harness's chat program with `uv`: requirements-verifiers.txt installs it beside Python."""
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def agent(model: ScriptedModel):
    vf = need("verifiers.v1")
    use_uv()
    from verifiers.v1.harnesses.null.harness import NullHarnessConfig

    return vf.make_agent(vf.AgentConfig(
        model="scripted", client=vf.EvalClientConfig(base_url=model.url, api_key_var="SCRIPTED_MODEL_KEY"),
        harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig(), max_turns=8))


def tool_images(message: dict[str, Any]) -> list[str]:
    content = message["content"] if isinstance(message["content"], list) else []
    return [p["image_url"]["url"].split(",", 1)[1] for p in content if p["type"] == "image_url"]


def act(url: str, sid: str, text: str) -> dict[str, Any]:
    return httpx.post(f"{url}/v1/sessions/{sid}/act", json={"text": text}, timeout=60).json()


def act_images(expected: dict[str, Any]) -> list[str]:
    return [part["image_url"]["url"].split(",", 1)[1] for message in expected["observation"]
            for part in (message["content"] if isinstance(message["content"], list) else [])
            if part["type"] == "image_url"]


def test_the_taskset_loads_rows_from_the_dataset(server, dataset):
    tasks = list(taskset(server, dataset))
    assert [t.data.id for t in tasks] == ["quadrants", "green"]
    first = tasks[0].data
    assert first.ground_truth == "red" and first.question == QUESTION
    image, text = first.prompt[0].content
    assert decode(image.image_url.url).size == picture().size and text.text == QUESTION
    assert [type(t).__name__ for t in tasks[0].toolsets(tasks[0].config)] == ["ToolserverToolset"]


def test_a_rollout_through_verifiers_equals_act_and_is_scored(server, dataset):
    """The documentation's snippet (examples/verifiers/rollout.py) runs the rollout."""
    task = next(iter(taskset(server, dataset)))
    zoom = {"name": "crop_image", "arguments": ZOOM}
    model = ScriptedModel({QUESTION: [{"calls": [zoom]}, {"calls": [zoom]}, {"text": ANSWER}]})
    use_uv()
    try:
        trace = asyncio.run(snippet("rollout", "verifiers").one_rollout(dataset, server.url, model.url, "scripted"))
    finally:
        model.close()
    assert trace.ok, trace.errors
    assert len(model.requests) == 3
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in model.requests[0]["tools"]}
    listed = httpx.get(f"{server.url}/v1/tools", params={"profile": "pixel-reasoner"}, timeout=10).json()
    assert {t["function"]["name"] for t in listed} <= set(tools)  # the profile's tools, by their own names
    assert all("session" not in schema.get("properties", {}) for schema in tools.values())  # no handle to manage
    # The same turns through /act on a twin session with the same image: each tool result equals /act's.
    twin = httpx.post(f"{server.url}/v1/sessions", json={"profile": "pixel-reasoner", "images": [
        {"data": task.data.images[0]}]}, timeout=30).json()["session_id"]
    for turn in (1, 2):
        shown = [m for m in model.requests[turn]["messages"] if m["role"] == "tool"][-1]
        expected = act(server.url, twin, CROP)
        assert tool_images(shown) == act_images(expected) and len(act_images(expected)) == 1
        texts = [p["text"] for p in shown["content"] if p["type"] == "text"]
        assert texts == [r["text"] for r in expected["results"]]
    assert trace.last_reply == ANSWER
    scored = httpx.post(f"{server.url}/v1/sessions/{twin}/reward", json={
        "turns": [ANSWER], "ground_truth": "red", "question": QUESTION}, timeout=30).json()
    assert scored["terms"]["accuracy"] == 1.0
    assert trace.rewards["toolserver"].score == scored["total"] > 0.0
    assert httpx.get(f"{server.url}/v1/sessions/{trace.state.session}", timeout=10).status_code == 404  # released


def test_a_malformed_call_is_mcps_error_and_another_rollout_goes_on(server, dataset):
    broken, other = list(taskset(server, dataset))
    model = ScriptedModel({
        QUESTION: [{"calls": [{"name": "crop_image", "arguments": MALFORMED}]}, {"text": ANSWER}],
        "Where is green?": [{"calls": [{"name": "crop_image", "arguments": ZOOM}]}, {"text": "\\boxed{top right}"}]})

    async def run():
        async with agent(model) as solver:
            return await asyncio.gather(solver.run(broken), solver.run(other))

    try:
        failed, fine = asyncio.run(run())
    finally:
        model.close()
    shown = [m for r in model.requests for m in r["messages"] if m["role"] == "tool"]
    error = next(m for m in shown if isinstance(m["content"], str))
    # What the model was shown is toolserver's own MCP tool error (`isError: true`) for that call.
    direct = asyncio.run(mcp_call(server.url, "crop_image", MALFORMED))
    assert direct.is_error and error["content"] == direct.content[0].text and "bbox_2d" in error["content"]
    twin = httpx.post(f"{server.url}/v1/sessions", json={"profile": "pixel-reasoner", "images": [
        {"data": other.data.images[0]}]}, timeout=30).json()["session_id"]
    expected = act(server.url, twin, CROP)
    assert tool_images(next(m for m in shown if isinstance(m["content"], list))) == act_images(expected)  # the other
    assert failed.ok and fine.ok
    assert failed.rewards["toolserver"].score > 0.0  # the broken rollout went on to its answer, and was scored
    assert set(fine.rewards) == {"toolserver"}


async def mcp_call(url: str, name: str, arguments: dict[str, Any]) -> Any:
    from mcp import Client

    image = base64.b64encode(png(picture())).decode()
    sid = httpx.post(f"{url}/v1/sessions", json={"profile": "pixel-reasoner", "images": [{"data": image}]},
                     timeout=30).json()["session_id"]
    async with Client(f"{url}/mcp?profile=pixel-reasoner&handles=off&session={sid}") as client:
        return await client.call_tool(name, arguments)


def test_a_bad_row_is_a_clear_error(server, tmp_path):
    (tmp_path / "pixel-reasoner.train.jsonl").write_text(json.dumps({"question": "?", "images": ["gone.png"]}) + "\n")
    with pytest.raises(ValueError, match=r"row 1: image 'gone.png' is neither a readable file nor base64"):
        list(taskset(server, str(tmp_path)))


def test_with_api_keys_the_rollouts_session_belongs_to_its_key(tmp_path_factory, dataset, monkeypatch):
    """verifiers strips `*API_KEY*` variables from its tool servers' environment: the key reaches the forwarding
    tool server over the rollout's state channel, and every call (the list, the zooms, the reward) carries it."""
    with running_toolserver(tmp_path_factory, api_keys='["vf-test-key"]') as keyed:
        assert httpx.post(f"{keyed.url}/v1/sessions", json={}, timeout=10).status_code == 401
        monkeypatch.setenv("TOOLSERVER_API_KEY", "vf-test-key")
        task = next(iter(taskset(keyed, dataset)))
        model = ScriptedModel({QUESTION: [{"calls": [{"name": "crop_image", "arguments": ZOOM}]}, {"text": ANSWER}]})

        async def run():
            async with agent(model) as solver:
                return await solver.run(task)

        try:
            trace = asyncio.run(run())
        finally:
            model.close()
    assert trace.ok, trace.errors
    shown = [m for m in model.requests[1]["messages"] if m["role"] == "tool"][-1]
    assert len(tool_images(shown)) == 1 and trace.rewards["toolserver"].score > 0.0
