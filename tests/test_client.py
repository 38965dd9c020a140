"""toolserver.client: retry policy on a scripted transport, then everything against a real server process."""

import asyncio
import concurrent.futures
import io
import time

import httpx
import pytest
from PIL import Image

from tests.conftest import PHOTOS, gradient, photo, png_bytes, start_server, stop_server
from toolserver.client import (
    AsyncClient,
    Client,
    ImageInput,
    SessionNotFound,
    ToolServerError,
    ToolServerOverloaded,
    ToolServerTimeout,
    ToolServerUnavailable,
)
from toolserver.imaging import encode_png

BRIDGE = "Bridge_by_Sander_Klootwijk.jpg"


# -- retry policy, on a transport that answers from a script -------------------------------------
def scripted(*answers):
    """A MockTransport answering in order; an exception instance is raised instead of answering."""
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((time.monotonic(), request))
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handler), calls


def ok_profiles():
    return httpx.Response(200, json=[{"name": "default"}])


def test_429_is_retried_after_the_servers_retry_after():
    transport, calls = scripted(httpx.Response(429, headers={"Retry-After": "0.3"},
                                               json={"detail": "busy", "code": "overloaded"}), ok_profiles())
    with Client("http://ts", transport=transport, backoff=5.0) as client:
        assert client.profiles() == [{"name": "default"}]
    assert len(calls) == 2
    waited = calls[1][0] - calls[0][0]
    assert 0.25 <= waited < 2.0, waited  # Retry-After, not the 5 s backoff


def test_retries_run_out_into_a_typed_error():
    busy = httpx.Response(429, json={"detail": "queue full", "code": "overloaded"}, headers={"Retry-After": "0"})
    transport, calls = scripted(busy)
    with Client("http://ts", transport=transport, retries=2) as client, \
            pytest.raises(ToolServerOverloaded, match="queue full") as info:
        client.profiles()
    assert len(calls) == 3 and info.value.status == 429 and info.value.code == "overloaded"

    transport, calls = scripted(httpx.Response(503, json={"detail": "shutting down", "code": "unavailable"},
                                               headers={"Retry-After": "0"}))
    with Client("http://ts", transport=transport, retries=1) as client, pytest.raises(ToolServerUnavailable):
        client.profiles()
    assert len(calls) == 2


def test_connection_refused_is_retried_but_a_read_timeout_is_not():
    transport, calls = scripted(httpx.ConnectError("refused"), ok_profiles())
    with Client("http://ts", transport=transport, backoff=0.01) as client:
        assert client.profiles()
    assert len(calls) == 2

    transport, calls = scripted(httpx.ReadTimeout("slow"), ok_profiles())
    with Client("http://ts", transport=transport, backoff=0.01) as client, pytest.raises(ToolServerTimeout):
        client.profiles()
    assert len(calls) == 1  # the call may have run: never sent twice


def test_protocol_errors_say_what_went_wrong():
    transport, _ = scripted(httpx.Response(404, json={"detail": "unknown session 'x'", "code": "not_found"}))
    with Client("http://ts", transport=transport) as client, pytest.raises(SessionNotFound, match="unknown session"):
        client.session("x")
    fastapi_422 = httpx.Response(422, json={"detail": [{"loc": ["body", "items"], "msg": "Field required"}]})
    transport, _ = scripted(fastapi_422)
    with Client("http://ts", transport=transport) as client, \
            pytest.raises(ToolServerError, match=r"body\.items: Field required"):
        client.validate([])


def test_async_client_retries_too():
    transport, calls = scripted(httpx.Response(503, headers={"Retry-After": "0.1"}, json={}), ok_profiles())

    async def main():
        async with AsyncClient("http://ts", transport=transport) as client:
            return await client.profiles()

    assert asyncio.run(main()) == [{"name": "default"}]
    assert len(calls) == 2


def test_api_key_is_sent_as_bearer():
    transport, calls = scripted(ok_profiles())
    with Client("http://ts", api_key="s3cret", transport=transport) as client:
        client.profiles()
    assert calls[0][1].headers["authorization"] == "Bearer s3cret"


# -- against a real server process ---------------------------------------------------------------


def test_session_from_pil_path_and_bytes(live_server):
    pil = gradient(640, 480)
    with Client(live_server.url) as ts, ts.create_session([pil, photo("TwoWings.jpg"), png_bytes(gradient(9, 7))],
                                                     texts={"answer": "One. Two."}) as session:
        wings = Image.open(photo("TwoWings.jpg")).size
        assert [(i.width, i.height) for i in session.images] == [(640, 480), wings, (9, 7)]
        assert session.image_bytes(session.images[0].key) == encode_png(pil)  # the upload, byte for byte
        result = session.call("zoom_in", image=session.images[0].key, bbox_2d=[0, 0, 500, 500])
        assert result.ok, result.text
        out = Image.open(io.BytesIO(result.images[0].content()))
        assert out.tobytes() == pil.convert("RGB").crop((0, 0, 320, 240)).tobytes()
        check = session.call("check_whether_response_sentence_number_in_range",
                             {"response": "answer", "lower_bound": 2, "upper_bound": 2})
        assert check.text == "Check result: True"
        sid = session.id
    with Client(live_server.url) as ts, pytest.raises(SessionNotFound):
        ts.session(sid)  # released on leaving the block


def test_tool_results_travel_as_msgpack_by_default_and_as_json_on_request(live_server):
    """The binary transport: the same result, its image as bytes in a msgpack body a quarter smaller than the
    JSON one; `binary=False` (or an older server) gives JSON with base64, decoded to the same bytes."""
    pil = gradient(640, 480)
    answers = {}
    for binary in (True, False):
        seen: list[httpx.Response] = []
        hooks = {"response": [seen.append]}
        with Client(live_server.url, binary=binary) as ts, ts.create_session([pil]) as session:
            ts._http.event_hooks = hooks
            result = session.call("zoom_in", image=0, bbox_2d=[0, 0, 500, 500])
        response = next(r for r in seen if r.request.url.path.endswith("/tools/zoom_in"))
        answers[binary] = (result, response.headers["content-type"], len(response.content))
    (fast, fast_type, fast_size), (plain, plain_type, plain_size) = answers[True], answers[False]
    assert fast_type == "application/msgpack" and plain_type == "application/json"
    assert isinstance(fast.images[0].data, bytes) and isinstance(plain.images[0].data, str)
    assert fast.images[0].content() == plain.images[0].content()
    assert fast.model_dump(exclude={"images"}) == plain.model_dump(exclude={"images"})
    assert fast_size < 0.8 * plain_size


def test_server_paths_urls_and_keys_go_as_json(live_server):
    with Client(live_server.url) as ts:
        session = ts.create_session({"bridge": ImageInput(path=str(PHOTOS / BRIDGE)), "small": gradient(8, 8)})
        assert [i.key for i in session.images] == ["bridge", "small"]
        assert session.images[0].width == 4352
        added = session.add_images([ImageInput(path=str(PHOTOS / "TwoWings.jpg"))])
        assert added[0].index == 2 and len(session.info().images) == 3
        bad = session.call("zoom_in", image="bridge", bbox_2d=[600, 100, 100, 500])
        assert not bad.ok and bad.error.code and "x1 < x2" in bad.text
        session.release()
        session.release()  # already gone: not an error


def test_tool_calls_from_openai_objects_and_act(live_server):
    from openai.types.chat import ChatCompletionMessageToolCall

    call = ChatCompletionMessageToolCall.model_validate({
        "id": "call_1", "type": "function",
        "function": {"name": "zoom_in", "arguments": '{"image": 0, "bbox_2d": [0, 0, 1000, 1000]}'}})
    with Client(live_server.url) as ts, ts.create_session([gradient(40, 30)]) as session:
        reply = session.run_tool_calls([call], image_message="user")
        assert [m["role"] for m in reply.messages] == ["tool", "user"]
        assert reply.messages[0]["tool_call_id"] == "call_1"
        acted = session.act('<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}'
                            "</tool_call>")
        assert acted.results[0].ok and acted.observation
        assert any(t["function"]["name"] == "zoom_in" for t in ts.list_tools("default"))
        assert ts.validate([{"tool": "check_whether_response_word_count_in_range", "text": "a b c",
                             "params": {"lower_bound": 3, "upper_bound": 3}}])[0].result is True


def test_async_client_against_the_server(live_server):
    async def trajectory(client: AsyncClient, i: int) -> list[bool]:
        async with await client.create_session([Image.new("RGB", (50, 40), (i, 0, 0))]) as session:
            results = [await session.call("zoom_in", image=0, bbox_2d=[0, 0, 1000, 1000]) for _ in range(3)]
            pixel = Image.open(io.BytesIO(results[-1].images[0].content())).getpixel((0, 0))
            return [r.ok for r in results] + [pixel == (i, 0, 0)]

    async def main():
        async with AsyncClient(live_server.url) as client:
            return await asyncio.gather(*(trajectory(client, i) for i in range(16)))

    assert all(all(oks) for oks in asyncio.run(main()))


def test_timeout_raises_and_the_server_stays_usable(live_server):
    with Client(live_server.url, timeout=30) as ts, ts.create_session([ImageInput(path=str(PHOTOS / BRIDGE))]) as session:
        with pytest.raises(ToolServerTimeout):
            session.call("zoom_in", image=0, bbox_2d=[0, 0, 1000, 1000], timeout=0.001)
        assert session.call("zoom_in", image=0, bbox_2d=[0, 0, 100, 100]).ok


@pytest.mark.slow
def test_retry_on_429_from_a_saturated_server(tmp_path):
    # One worker, one admitted job: concurrent full-frame zooms of a 4352x3264 photo overflow at once.
    # (Calls of one session run one at a time, so each thread has its own session.)
    live = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path), "TOOLSERVER_ALLOWED_ROOTS": f'["{PHOTOS}"]',
                         "TOOLSERVER_WORKERS": "1", "TOOLSERVER_QUEUE_LIMIT": "1"})
    try:
        with Client(live.url, retries=50, backoff=0.05, max_backoff=0.5) as setup:
            session_ids = [setup.create_session([ImageInput(path=str(PHOTOS / BRIDGE))]).id for _ in range(6)]

        def zoom(job: tuple[str, int]) -> str:
            session_id, retries = job
            with Client(live.url, retries=retries, backoff=0.05, max_backoff=0.5) as client:
                try:
                    handle = client.session(session_id)
                    return "ok" if handle.call("zoom_in", image=0, bbox_2d=[0, 0, 1000, 1000]).ok else "fail"
                except ToolServerOverloaded:
                    return "429"

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            without = list(pool.map(zoom, [(sid, 0) for sid in session_ids]))
            with_retries = list(pool.map(zoom, [(sid, 50) for sid in session_ids]))
        assert "429" in without, without
        assert with_retries == ["ok"] * 6, with_retries
    finally:
        stop_server(live)
