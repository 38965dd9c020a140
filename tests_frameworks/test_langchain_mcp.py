"""LangChain (langchain-mcp-adapters + `langchain.agents.create_agent`, on LangGraph): the tools from
`MultiServerMCPClient.get_tools()` (a new MCP session per call, so the image goes inline), run by an agent whose
chat model is langchain_core's scripted `GenericFakeChatModel`. The tool message carries the crop as an image
content block, then the tool's texts."""

from __future__ import annotations

import asyncio

from tests_frameworks.conftest import data_uri, decode, need, picture, snippet, top_left_crop


def test_agent_with_mcp_tools(toolserver):
    need("langchain_mcp_adapters")
    need("langchain")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):  # the fake ignores tools; the agent only needs the method
            return self

    image = data_uri(picture())
    model = Scripted(messages=iter([
        AIMessage("", tool_calls=[{"name": "zoom_in", "args": {"image": image, "bbox_2d": [0, 0, 500, 500]},
                                   "id": "call_1"}]),
        AIMessage("The top left corner is red.")]))
    result = asyncio.run(snippet("langchain_mcp").ask(toolserver.url, image, "What colour is the top left corner?",
                                                      model))

    messages = result["messages"]
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    tool_message = messages[2]
    assert isinstance(tool_message, ToolMessage) and tool_message.status == "success"
    blocks = tool_message.content
    assert blocks[0]["type"] == "image" and blocks[0]["mime_type"] == "image/png"
    assert top_left_crop(decode(blocks[0]["base64"]))
    assert blocks[1]["type"] == "text" and blocks[1]["text"].startswith("Zoomed in on `original_image`")
    assert blocks[-1]["text"] == "(Inline images stored as `original_image`.)"
    assert messages[-1].content == "The top left corner is red."


def test_bound_session_keeps_images(toolserver):
    """`?session=<id>`: every MCP session the adapter opens works in that toolserver session."""
    need("langchain_mcp_adapters")
    import httpx
    from langchain_mcp_adapters.client import MultiServerMCPClient

    session = httpx.post(f"{toolserver.url}/v1/sessions", json={"images": [{"data": data_uri(picture())}]},
                         timeout=60).json()["session_id"]
    client = MultiServerMCPClient({"toolserver": {
        "transport": "http", "url": f"{toolserver.url}/mcp?profile=default&session={session}"}})

    async def zoom_twice():
        tools = {tool.name: tool for tool in await client.get_tools()}
        first = await tools["zoom_in"].ainvoke({"image": "original_image", "bbox_2d": [0, 0, 500, 500]})
        second = await tools["zoom_in"].ainvoke({"image": 1, "bbox_2d": [0, 0, 1000, 1000]})  # the first crop
        return first, second

    try:
        first, second = asyncio.run(zoom_twice())
    finally:
        httpx.delete(f"{toolserver.url}/v1/sessions/{session}", timeout=60)
    assert top_left_crop(decode(first[0]["base64"]))
    assert top_left_crop(decode(second[0]["base64"]))


def test_the_model_keeps_its_images_in_a_session_handle(toolserver):
    """`handles=on`: the model reads the handle `load_image` answers and passes it as `session` in each later call,
    while the adapter opens a new MCP session for every call; a zoom on the first zoom's result works."""
    need("langchain_mcp_adapters")
    need("langchain")
    import re

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    image = data_uri(picture())

    class HandleReader(GenericFakeChatModel):
        """Scripted turns; the session handle is read off the last tool answer, as a model reads it."""

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            answers = [m for m in messages if isinstance(m, ToolMessage)]
            said = " ".join(b["text"] for b in (answers[0].content if answers else []) if b.get("type") == "text")
            handle = re.search(r'"session": "([A-Za-z0-9_-]{32})"', said)
            turns = [("load_image", {"data": image}),
                     ("zoom_in", {"image": "original_image", "bbox_2d": [0, 0, 500, 500]}),
                     ("zoom_in", {"image": "observation_1", "bbox_2d": [0, 0, 500, 500]})]
            if len(answers) == len(turns):
                return ChatResult(generations=[ChatGeneration(message=AIMessage("The top left corner is red."))])
            name, args = turns[len(answers)]
            if answers:
                assert handle is not None, said
                args = {**args, "session": handle.group(1)}
            call = {"name": name, "args": args, "id": f"call_{len(answers)}"}
            return ChatResult(generations=[ChatGeneration(message=AIMessage("", tool_calls=[call]))])

    result = asyncio.run(snippet("langchain_handles", "mcp").ask(toolserver.url, image, "What colour is the top "
                                                                  "left corner?", HandleReader(messages=iter([]))))
    tool_messages = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in tool_messages] == ["success"] * 3, [m.content for m in tool_messages]
    first, second = (decode(m.content[0]["base64"]) for m in tool_messages[1:])
    assert top_left_crop(first)
    assert second.size == (100, 75) and second.getcolors() == [(100 * 75, (200, 30, 30))]  # the crop of the crop
    assert "`observation_2`" in tool_messages[2].content[-1]["text"]
    assert result["messages"][-1].content == "The top left corner is red."
