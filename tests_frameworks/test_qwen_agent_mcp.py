"""Qwen-Agent: toolserver's MCP endpoint as an Assistant's `mcpServers` entry, its tools called directly (the
LLM never runs).
Qwen-Agent's MCP client keeps only a result's text blocks: a text tool answers in full, `zoom_in` gives its
caption and no image. Its MCP manager is a process-wide singleton running an event loop in a thread: the test
shuts it down."""

from __future__ import annotations

from tests_frameworks.conftest import data_uri, need, picture, snippet

# An Assistant needs an LLM; building one connects nowhere, and the test never lets it answer.
UNUSED_LLM = {"model": "qwen3-vl", "model_server": "http://127.0.0.1:9/v1", "api_key": "unused"}


def test_mcp_tools_in_an_assistant(toolserver):
    need("qwen_agent")
    need("mcp")
    from qwen_agent.tools.mcp_manager import MCPManager

    try:
        checked, zoomed = snippet("qwen_agent_mcp").check_and_zoom(toolserver.url, data_uri(picture()), UNUSED_LLM)
    finally:
        MCPManager().shutdown()  # closes the MCP sessions, stops the manager's loop thread
        MCPManager._instance = None  # the next MCPManager() starts a new loop (shutdown leaves a stopped one)

    assert checked.startswith("Check result: True")
    assert zoomed.startswith("Zoomed in on `original_image`")
    assert zoomed.endswith("(Inline images stored as `original_image`.)")
    assert "base64" not in zoomed and "iVBOR" not in zoomed  # the image block was dropped
