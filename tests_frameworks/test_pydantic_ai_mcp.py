"""pydantic-ai: `MCPToolset` as an Agent's toolset, the Agent driven by pydantic-ai's own `FunctionModel`, scripted
to crop the image (passed inline as a data URI) and then answer. pydantic-ai turns MCP image blocks into
`BinaryImage` parts of the tool's return, which the model sees on its next turn."""

from __future__ import annotations

import asyncio
import re

from tests_frameworks.conftest import data_uri, decode, need, picture, snippet, top_left_crop


def test_agent_with_mcp_toolset(toolserver):
    need("pydantic_ai")
    from pydantic_ai.messages import BinaryContent, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    seen: list[list] = []

    def script(messages: list, info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        if len(messages) == 1:  # the user's question: crop the image it names
            prompt = messages[0].parts[-1].content
            image = re.search(r"data:\S+", prompt).group(0)
            return ModelResponse(parts=[ToolCallPart("zoom_in", {"image": image, "bbox_2d": [0, 0, 500, 500]},
                                                     tool_call_id="call_1")])
        return ModelResponse(parts=[TextPart("The top left corner is red.")])

    result = asyncio.run(snippet("pydantic_ai_mcp").ask(toolserver.url, data_uri(picture()),
                                                        "What colour is the top left corner?", FunctionModel(script)))

    assert result.output == "The top left corner is red."
    # What the model saw on its second turn: the tool's return, the crop first, then the tool's texts.
    returned = next(part for message in seen[1] for part in message.parts if isinstance(part, ToolReturnPart))
    assert returned.tool_name == "zoom_in" and returned.tool_call_id == "call_1"
    images = [item for item in returned.content if isinstance(item, BinaryContent)]
    assert len(images) == 1 and images[0].media_type == "image/png" and top_left_crop(decode(images[0].data))
    assert "(Inline images stored as `original_image`.)" in returned.content
