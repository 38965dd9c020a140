"""LangChain: toolserver's MCP tools as LangChain tools (langchain-mcp-adapters), run by a `create_agent` agent."""

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_mcp_adapters.client import MultiServerMCPClient


async def ask(toolserver_url: str, image_url: str, question: str, model: BaseChatModel | str) -> dict:
    # Each tool call opens a new MCP session, so the image travels inline (a URL or data: URI in `image`). To keep
    # images between calls, create a session (POST /v1/sessions) and add `&session=<session_id>` to the URL.
    client = MultiServerMCPClient({"toolserver": {"transport": "http", "url": f"{toolserver_url}/mcp?profile=default"}})
    tools = await client.get_tools()
    agent = create_agent(model, tools, system_prompt="Look closer with the tools when details matter.")
    return await agent.ainvoke({"messages": [{"role": "user", "content": f"{question} The image: {image_url}"}]})
