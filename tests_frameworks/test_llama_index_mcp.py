"""llama-index (`BasicMCPClient` + `McpToolSpec`): the `zoom_in` FunctionTool, the image inline (the client opens a
new MCP session per call). llama-index folds a tool's result into text: `ToolOutput.content`, what an agent's LLM
is given, is the CallToolResult written out, the crop only as its base64 string; the result itself stays in
`raw_output`."""

from __future__ import annotations

import asyncio
import re

from tests_frameworks.conftest import data_uri, decode, need, picture, snippet, top_left_crop


def test_zoom_in_tool(toolserver):
    need("llama_index.tools.mcp")
    output = asyncio.run(snippet("llama_index_mcp").zoom(toolserver.url, data_uri(picture())))

    result = output.raw_output  # MCP's CallToolResult
    assert not result.is_error
    image = result.content[0]
    assert image.type == "image" and image.mime_type == "image/png" and top_left_crop(decode(image.data))
    assert result.content[-1].text == "(Inline images stored as `original_image`.)"

    # The text the LLM gets: no image block, the crop's base64 inside the result's repr.
    assert isinstance(output.content, str) and [block.block_type for block in output.blocks] == ["text"]
    written = re.search(r"ImageContent\(type='image', data='([A-Za-z0-9+/=]+)'", output.content)
    assert written is not None and top_left_crop(decode(written.group(1)))
    assert "Zoomed in on `original_image`" in output.content


def test_a_session_handle_keeps_the_images_between_calls(toolserver):
    """A new MCP session per call; the handle from `open_session`, passed as `session`, keeps the images: a zoom on
    the first zoom's result is the crop of the crop."""
    need("llama_index.tools.mcp")
    outputs = asyncio.run(snippet("llama_index_handles", "mcp").zoom_twice(toolserver.url, data_uri(picture())))

    results = [output.raw_output for output in outputs]
    assert not any(result.is_error for result in results), [result.content for result in results]
    assert results[0].content[0].text.startswith("Loaded image `original_image`")
    first, second = decode(results[1].content[0].data), decode(results[2].content[0].data)
    assert top_left_crop(first)
    assert second.size == (100, 75) and second.getcolors() == [(100 * 75, (200, 30, 30))]
    assert results[3].content[0].text.startswith("Closed session")
