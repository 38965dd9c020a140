"""smolagents: toolserver's MCP tools as smolagents tools (`MCPClient`, built on mcpadapt)."""

from PIL.Image import Image
from smolagents import MCPClient


def zoom(toolserver_url: str, image_data_uri: str) -> Image:
    server = {"url": f"{toolserver_url}/mcp?profile=default", "transport": "streamable-http"}
    with MCPClient(server, structured_output=False) as tools:  # one MCP session until the block ends
        zoom_in = next(tool for tool in tools if tool.name == "zoom_in")
        # A tool returns only the result's first content block: toolserver puts the image first, as a PIL image.
        return zoom_in(image=image_data_uri, bbox_2d=[0, 0, 500, 500])
