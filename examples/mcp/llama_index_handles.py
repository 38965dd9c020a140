"""llama-index with session handles: `BasicMCPClient` opens a new MCP session for every call, so `open_session`
gives a handle and each call passes it as `session` (`handles=on` puts that argument on every tool)."""

from llama_index.core.tools import ToolOutput
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec


async def zoom_twice(toolserver_url: str, image_data_uri: str) -> list[ToolOutput]:
    client = BasicMCPClient(f"{toolserver_url}/mcp?profile=default&handles=on")
    tools = {tool.metadata.name: tool for tool in await McpToolSpec(client=client).to_tool_list_async()}
    opened = await tools["open_session"].acall()
    session = opened.raw_output.structured_content["session"]  # also in its text, for a model to read
    return [await tools["load_image"].acall(data=image_data_uri, session=session),
            await tools["zoom_in"].acall(image="original_image", bbox_2d=[0, 0, 500, 500], session=session),
            await tools["zoom_in"].acall(image="observation_1", bbox_2d=[0, 0, 500, 500], session=session),
            await tools["close_session"].acall(session=session)]
