"""smolagents (`MCPClient`, through mcpadapt): the `zoom_in` tool called directly. The adapter keeps only a
result's first content block, which toolserver makes the image, and hands it back as a PIL image."""

from __future__ import annotations

from tests_frameworks.conftest import data_uri, need, picture, snippet, top_left_crop


def test_zoom_in_tool_returns_the_crop(toolserver):
    need("smolagents")
    need("mcpadapt")
    crop = snippet("smolagents_mcp").zoom(toolserver.url, data_uri(picture()))
    assert crop.format == "PNG"
    assert top_left_crop(crop.convert("RGB"))
