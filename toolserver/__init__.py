"""toolserver: tools for vision-language models that think with images, served over HTTP and MCP."""

__version__ = "0.1.0"
