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
