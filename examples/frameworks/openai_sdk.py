"""OpenAI SDK: chat completions with toolserver's tools; `/tool_calls` runs the model's calls."""

import httpx
from openai import OpenAI


def ask(llm: OpenAI, model: str, toolserver_url: str, image_url: str, question: str) -> list[dict]:
    toolserver = httpx.Client(base_url=toolserver_url, timeout=120)
    tools = toolserver.get("/v1/tools", params={"strict": "true"}).json()  # strict: nulls mean "not given"
    session = toolserver.post("/v1/sessions", json={"images": [{"url": image_url} if image_url.startswith("http")
                                                               else {"data": image_url}]}).json()["session_id"]
    messages: list[dict] = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                                         {"type": "text", "text": question}]}]
    try:
        for _ in range(8):  # model turns
            reply = llm.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                break
            calls = [call.model_dump() for call in reply.tool_calls]
            answer = toolserver.post(f"/v1/sessions/{session}/tool_calls",
                                     json={"tool_calls": calls, "image_message": "user"})
            messages += answer.json()["messages"]  # a tool message per call, then the images in a user message
    finally:
        toolserver.delete(f"/v1/sessions/{session}")
    return messages
