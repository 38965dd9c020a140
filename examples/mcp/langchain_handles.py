"""LangChain with session handles: langchain-mcp-adapters opens a new MCP session for every tool call, so the
session travels as a handle. `handles=on` gives every tool a `session` argument; the model's first `load_image`
opens a session and answers its handle, and the model passes it in every later call."""

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_mcp_adapters.client import MultiServerMCPClient

SYSTEM = ("Look closer with the tools when details matter. Load the image with load_image first; then pass the "
          "session handle it answers as `session` in every tool call.")


async def ask(toolserver_url: str, image_url: str, question: str, model: BaseChatModel | str) -> dict:
    url = f"{toolserver_url}/mcp?profile=default&handles=on"
    client = MultiServerMCPClient({"toolserver": {"transport": "http", "url": url}})
    agent = create_agent(model, await client.get_tools(), system_prompt=SYSTEM)
    return await agent.ainvoke({"messages": [{"role": "user", "content": f"{question} The image: {image_url}"}]})
