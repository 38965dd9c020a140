"""pydantic-ai: toolserver's MCP endpoint as an Agent's toolset (`MCPToolset`, formerly `MCPServerStreamableHTTP`)."""

from pydantic_ai import Agent, AgentRunResult
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models import Model


async def ask(toolserver_url: str, image_url: str, question: str, model: Model | str) -> AgentRunResult[str]:
    toolserver = MCPToolset(f"{toolserver_url}/mcp?profile=default")
    agent = Agent(model, toolsets=[toolserver], instructions="Look closer with the tools when details matter.")
    async with agent:  # one MCP session (one toolserver session) for the whole run
        # A tool's `image` may be the URL itself (or a data: URI): the server loads it, then names its key.
        return await agent.run(f"{question} The image: {image_url}")
