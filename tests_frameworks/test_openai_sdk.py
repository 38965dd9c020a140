"""The OpenAI SDK (`openai`): chat completions with the strict tool schemas, the model's tool calls run by
`/tool_calls`. The model is scripted (an httpx transport answering as a strict-mode model would: every optional
argument present as null)."""

from __future__ import annotations

import json

import httpx

from tests_frameworks.conftest import data_uri, decode, need, picture, snippet, top_left_crop


def scripted_model(seen: list[dict]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        turn = sum(1 for message in body["messages"] if message["role"] == "assistant")
        if turn == 0:
            call = {"id": "call_1", "type": "function", "function": {
                "name": "zoom_in", "arguments": json.dumps({"image": 0, "bbox_2d": [0, 0, 500, 500], "label": None})}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": "The top left corner is red."}
        return httpx.Response(200, json={
            "id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if turn == 0 else "stop"}]})

    return httpx.MockTransport(answer)


def test_chat_completions_with_toolserver_tools(toolserver):
    openai = need("openai")
    seen: list[dict] = []
    llm = openai.OpenAI(api_key="scripted", base_url="http://model.invalid/v1",
                        http_client=httpx.Client(transport=scripted_model(seen)))
    messages = snippet("openai_sdk").ask(llm, "scripted", toolserver.url, data_uri(picture()),
                                         "What colour is the top left corner?")

    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert all(tool["function"].get("strict") for tool in seen[0]["tools"])  # the strict schemas went out
    assert messages[2]["tool_call_id"] == "call_1" and "observation_1" in str(messages[2]["content"])
    image_part = next(part for part in messages[3]["content"] if part["type"] == "image_url")
    assert top_left_crop(decode(image_part["image_url"]["url"]))
    assert seen[1]["messages"][3] == messages[3]  # the model saw the crop on its next turn
    assert messages[-1]["content"] == "The top left corner is red."
