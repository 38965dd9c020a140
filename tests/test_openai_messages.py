"""The messages /tool_calls returns, checked against the official `openai` package's chat message types."""

import asyncio

import pytest
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionMessageToolCall,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from pydantic import TypeAdapter, ValidationError

from tests.conftest import b64, gradient, png_bytes
from toolserver.models import CreateSessionRequest, ImageInput, OpenAIToolCall

TOOL_MESSAGE = TypeAdapter(ChatCompletionToolMessageParam)
USER_MESSAGE = TypeAdapter(ChatCompletionUserMessageParam)
ANY_MESSAGE = TypeAdapter(ChatCompletionMessageParam)


def check(adapter: TypeAdapter, message: dict) -> None:
    validated = adapter.validate_python(message, strict=True)
    if not isinstance(validated["content"], str):
        list(validated["content"])  # the types say Iterable[...], which pydantic checks as it is consumed


def run_calls(core, image_message: str):
    calls = [
        ChatCompletionMessageToolCall.model_validate({"id": "call_zoom", "type": "function", "function": {
            "name": "zoom_in", "arguments": '{"image": "original_image", "bbox_2d": [0, 0, 500, 500]}'}}),
        ChatCompletionMessageToolCall.model_validate({"id": "call_bad", "type": "function", "function": {
            "name": "zoom_in", "arguments": '{"image": "original_image", "bbox_2d": [0, 0'}}),
        ChatCompletionMessageToolCall.model_validate({"id": "call_check", "type": "function", "function": {
            "name": "check_whether_response_word_count_in_range",
            "arguments": '{"response": "two words", "lower_bound": 2, "upper_bound": 2}'}}),
    ]

    async def main():
        await core.start()
        try:
            created = await core.create_session(CreateSessionRequest(
                images=[ImageInput(data=b64(png_bytes(gradient(80, 60))))]))
            parsed = [OpenAIToolCall.model_validate(c.model_dump()) for c in calls]
            return await core.execute_tool_calls(created.session_id, parsed, image_message)
        finally:
            await core.stop()

    return asyncio.run(main())


def test_user_mode_messages_are_valid_openai_messages(core):
    reply = run_calls(core, "user")
    *tools, follow_up = reply.messages
    assert [m["tool_call_id"] for m in tools] == ["call_zoom", "call_bad", "call_check"]
    for message in tools:
        check(TOOL_MESSAGE, message)
        check(ANY_MESSAGE, message)
        assert isinstance(message["content"], str)
    assert "invalid" in tools[1]["content"].lower() or "json" in tools[1]["content"].lower()
    assert tools[2]["content"] == "Check result: True"
    check(USER_MESSAGE, follow_up)
    check(ANY_MESSAGE, follow_up)
    assert [p["type"] for p in follow_up["content"]] == ["text", "image_url"]
    assert follow_up["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


def test_tool_mode_puts_images_in_the_tool_message_which_openai_does_not_allow(core):
    # The Qwen-VL / verl chat templates render images inside tool messages; OpenAI's schema does not.
    reply = run_calls(core, "tool")
    zoom, bad, checked = reply.messages
    assert [p["type"] for p in zoom["content"]] == ["image_url", "text"]
    with pytest.raises(ValidationError):
        check(TOOL_MESSAGE, zoom)
    for text_only in (bad, checked):  # text-only results are plain OpenAI tool messages in either mode
        check(TOOL_MESSAGE, text_only)
