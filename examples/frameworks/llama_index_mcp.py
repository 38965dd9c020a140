"""llama-index: toolserver's MCP tools as llama-index FunctionTools (`BasicMCPClient` + `McpToolSpec`)."""

from llama_index.core.tools import ToolOutput
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec


async def zoom(toolserver_url: str, image_data_uri: str) -> ToolOutput:
    # Each call opens a new MCP session, so the image travels inline (or bind one: `&session=<session_id>`).
    client = BasicMCPClient(f"{toolserver_url}/mcp?profile=default")
    tools = {tool.metadata.name: tool for tool in await McpToolSpec(client=client).to_tool_list_async()}
    # `.raw_output` is MCP's CallToolResult (the crop as an image block); `.content`, what an agent's LLM gets,
    # is that result written out as text: the image only as its base64 string.
    return await tools["zoom_in"].acall(image=image_data_uri, bbox_2d=[0, 0, 500, 500])
