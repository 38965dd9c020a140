"""fastmcp: its Client over toolserver's MCP endpoint, one MCP session (and toolserver session) per block."""

import fastmcp


async def zoom(toolserver_url: str, image_data_uri: str) -> fastmcp.client.client.CallToolResult:
    async with fastmcp.Client(f"{toolserver_url}/mcp?profile=default") as client:
        tools = [tool.name for tool in await client.list_tools()]
        assert "zoom_in" in tools
        await client.call_tool("load_image", {"data": image_data_uri, "key": "photo"})
        return await client.call_tool("zoom_in", {"image": "photo", "bbox_2d": [0, 0, 500, 500]})
