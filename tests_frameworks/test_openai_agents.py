"""The OpenAI Agents SDK (`openai-agents`): `MCPServerStreamableHttp` as an Agent's MCP server, run with a scripted
model (the SDK's `Model` interface) that crops the image it was told the key of, then answers."""

from __future__ import annotations

import asyncio
import json
import re

from tests_frameworks.conftest import data_uri, decode, need, picture, snippet, top_left_crop


def scripted_model():
    agents = need("agents")
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    class Scripted(agents.Model):
        def __init__(self) -> None:
            self.calls: list[dict] = []

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                               tracing, **kwargs):
            self.calls.append({"input": input, "tools": [tool.name for tool in tools]})
            if len(self.calls) == 1:  # crop the image the user message names
                key = re.search(r"Loaded image `(\w+)`", json.dumps(input)).group(1)
                arguments = json.dumps({"image": key, "bbox_2d": [0, 0, 500, 500]})
                output = [ResponseFunctionToolCall(type="function_call", call_id="call_1", name="zoom_in",
                                                   arguments=arguments)]
            else:
                output = [ResponseOutputMessage(id="msg_1", type="message", role="assistant", status="completed",
                                                content=[ResponseOutputText(type="output_text", annotations=[],
                                                                            text="The top left corner is red.")])]
            return agents.ModelResponse(output=output, usage=agents.Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    return Scripted()


def test_agent_with_toolserver_mcp_server(toolserver):
    agents = need("agents")
    agents.set_tracing_disabled(True)  # no trace export to OpenAI
    model = scripted_model()
    result = asyncio.run(snippet("openai_agents").ask(toolserver.url, data_uri(picture()),
                                                      "What colour is the top left corner?", model))

    assert result.final_output == "The top left corner is red."
    assert {"zoom_in", "load_image"} <= set(model.calls[0]["tools"])
    # The model's second turn got the tool's output: the crop as an input_image, then the tool's text.
    output = next(item for item in model.calls[1]["input"] if item.get("type") == "function_call_output")
    assert output["call_id"] == "call_1"
    image = next(part for part in output["output"] if part["type"] == "input_image")
    assert top_left_crop(decode(image["image_url"]))
    assert any(part["type"] == "input_text" and "original_image" in part["text"] for part in output["output"])
