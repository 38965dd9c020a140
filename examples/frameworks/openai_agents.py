"""OpenAI Agents SDK: toolserver as an Agent's MCP server, the user's image loaded into its MCP session first."""

from agents import Agent, Model, Runner, RunResult
from agents.mcp import MCPServerStreamableHttp


async def ask(toolserver_url: str, image_data_uri: str, question: str, model: str | Model) -> RunResult:
    params = {"url": f"{toolserver_url}/mcp?profile=default", "timeout": 60}
    async with MCPServerStreamableHttp(params, cache_tools_list=True, client_session_timeout_seconds=120) as toolserver:
        # One MCP session per `async with`: an image loaded here stays for every tool call of the run.
        loaded = await toolserver.call_tool("load_image", {"data": image_data_uri})  # "Loaded image `original_image` …"
        agent = Agent(name="viewer", instructions="Look closer with the tools when details matter.",
                      mcp_servers=[toolserver], model=model)
        return await Runner.run(agent, [{"role": "user", "content": [
            {"type": "input_image", "image_url": image_data_uri, "detail": "auto"},
            {"type": "input_text", "text": f"{loaded.content[0].text} {question}"}]}])
