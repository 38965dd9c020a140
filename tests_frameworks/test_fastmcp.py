"""fastmcp's own client against the MCP endpoint."""

from __future__ import annotations

import asyncio

from tests_frameworks.conftest import data_uri, decode, need, picture, snippet, top_left_crop


def test_fastmcp_client_loads_and_zooms(toolserver):
    need("fastmcp")
    result = asyncio.run(snippet("fastmcp_client").zoom(toolserver.url, data_uri(picture())))
    assert not result.is_error
    image = result.content[0]
    assert image.type == "image" and image.mime_type == "image/png"
    assert top_left_crop(decode(image.data))
