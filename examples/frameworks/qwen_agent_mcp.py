"""Qwen-Agent: toolserver's MCP endpoint in an Assistant's function_list (Qwen-Agent's MCP manager)."""

import json

from qwen_agent.agents import Assistant


def check_and_zoom(toolserver_url: str, image_data_uri: str, llm: dict) -> tuple[str, str]:
    # "type": "streamable-http" (Qwen-Agent's default for a "url" is the old SSE transport); one MCP session.
    server = {"type": "streamable-http", "url": f"{toolserver_url}/mcp?profile=default"}
    bot = Assistant(llm=llm, function_list=[{"mcpServers": {"toolserver": server}}])
    tools = bot.function_map  # "<server>-<tool>", as `bot.run` lets the LLM call them: texts only
    checked = tools["toolserver-check_whether_response_word_count_in_range"].call(
        json.dumps({"response": "three short words", "lower_bound": 3, "upper_bound": 3}))
    zoomed = tools["toolserver-zoom_in"].call(json.dumps({"image": image_data_uri, "bbox_2d": [0, 0, 500, 500]}))
    return checked, zoomed  # zoomed: the crop's caption, not the crop
