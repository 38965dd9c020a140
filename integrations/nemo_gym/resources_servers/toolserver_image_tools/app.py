"""NeMo Gym resources server whose tools and verifier are a toolserver's, reached by URL (docs/nemo-gym.md).

Thin over toolserver's own client: `/seed_session` opens one toolserver session (profile `nemo-gym`, NeMo Gym's
image tools) with the row's input images; every other `POST /<tool name>` is that session's tool call, answered
with toolserver's result (`ok`, `text`, `images` as base64, `meta`); `/verify` scores the rollout with the
session's reward (`POST /v1/sessions/{id}/reward`: PivotRL's action match for rows that say
`verifier: image_tools_pivot`, else the image-tools agent's reward) and releases the session. A protocol failure
from toolserver (an unknown tool, a session gone) comes back with toolserver's status and `{"error": ...}`.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseRunRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import ConfigDict, Field, PrivateAttr

from toolserver.client import AsyncClient, AsyncSession, ImageInput, ToolServerError


class ToolserverImageToolsConfig(BaseResourcesServerConfig):
    toolserver_url: str = "http://127.0.0.1:8000"
    toolserver_api_key: str | None = None
    profile: str = "nemo-gym"
    # The reward when a row names none: `image_tools_pivot` (PivotRL) or `agent` (the image-tools agent's).
    verifier: str = "agent"
    # PivotRL's settings (reward_mode, argument_threshold, ...) over the shipped config's.
    settings: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = 60.0


class ToolserverSeedRequest(BaseRunRequest):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ToolserverVerifyRequest(BaseVerifyRequest):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    verifier: str | None = None
    expected_answer: Any = None
    ground_truth: Any = None
    base_reward: float | None = None
    metadata: dict[str, Any] | None = None


class ToolserverVerifyResponse(BaseVerifyResponse):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    reward_terms: dict[str, float] = Field(default_factory=dict)
    reward_details: dict[str, Any] = Field(default_factory=dict)
    reward_source: str = ""
    toolserver_session_id: str = ""


def input_images(params: dict[str, Any]) -> list[ImageInput]:
    """The `input_image` parts of the row's input, in order: data URIs as `data`, anything else as `url`."""
    found = []
    messages = params.get("input")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            url = part.get("image_url") if isinstance(part, dict) and part.get("type") == "input_image" else None
            if url:
                found.append(ImageInput(data=url) if url.startswith("data:") else ImageInput(url=url))
    return found


def question_of(params: dict[str, Any]) -> str | None:
    """The last user message's text."""
    texts = []
    messages = params.get("input")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            parts = [content] if isinstance(content, str) else [
                p.get("text", "") for p in content or [] if isinstance(p, dict) and p.get("type") == "input_text"]
            texts = [t for t in parts if t]
    return "\n".join(texts) or None


def rollout_turns(output: list[dict[str, Any]]) -> list[str]:
    """The model's turns as text: each turn's messages, then its function calls written as NeMo Gym's
    `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks; a tool's output closes the turn."""
    turns: list[str] = []
    current: list[str] = []
    for item in output:
        kind = item.get("type")
        if kind == "message" and item.get("role", "assistant") == "assistant":
            current += [p.get("text", "") for p in item.get("content") or [] if isinstance(p, dict)]
        elif kind == "function_call":
            try:
                arguments = json.loads(item.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = item.get("arguments")
            current.append("<tool_call>" + json.dumps({"name": item.get("name"), "arguments": arguments})
                           + "</tool_call>")
        elif kind == "function_call_output" and current:
            turns.append("\n".join(current))
            current = []
    if current:
        turns.append("\n".join(current))
    return turns


def error_response(exc: ToolServerError) -> JSONResponse:
    return JSONResponse({"error": {"code": exc.code or "toolserver_error", "message": exc.message}},
                        status_code=exc.status or 502)


class ToolserverImageToolsServer(SimpleResourcesServer):
    config: ToolserverImageToolsConfig
    _sessions: dict[str, AsyncSession] = PrivateAttr(default_factory=dict)
    _client: AsyncClient | None = PrivateAttr(default=None)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/{tool_name}")(self.call_tool)  # after the fixed routes, so they still match first
        return app

    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient(self.config.toolserver_url, api_key=self.config.toolserver_api_key,
                                       timeout=self.config.timeout_s, binary=False)
        return self._client

    async def seed_session(self, request: Request, body: ToolserverSeedRequest) -> BaseSeedSessionResponse:
        # A JSONResponse (toolserver's refusal) passes through FastAPI as it is.
        params = body.responses_create_params.model_dump(mode="json", exclude_none=True)
        gym_session = request.session[SESSION_ID_KEY]
        old = self._sessions.pop(gym_session, None)
        if old is not None:
            await old.release()
        try:
            self._sessions[gym_session] = await self.client().create_session(input_images(params),
                                                                            profile=self.config.profile)
        except ToolServerError as exc:  # an image toolserver refuses: its status and message
            return error_response(exc)
        return BaseSeedSessionResponse()

    async def call_tool(self, tool_name: str, request: Request,
                        arguments: dict[str, Any] = Body(default_factory=dict)) -> JSONResponse:
        session = self._sessions.get(request.session[SESSION_ID_KEY])
        if session is None:
            return JSONResponse({"error": {"code": "no_session", "message": (
                "this rollout has no toolserver session: POST /seed_session first")}}, status_code=409)
        try:
            result = await session.call(tool_name, arguments)
        except ToolServerError as exc:
            return error_response(exc)
        return JSONResponse(result.model_dump(mode="json", exclude_none=True))

    async def verify(self, request: Request, body: ToolserverVerifyRequest) -> ToolserverVerifyResponse:
        session = self._sessions.pop(request.session[SESSION_ID_KEY], None)
        if session is None:
            raise ValueError("this rollout has no toolserver session: POST /seed_session before /verify")
        params = body.responses_create_params.model_dump(mode="json", exclude_none=True)
        turns = rollout_turns(body.response.model_dump(mode="json")["output"])
        verifier = body.verifier or self.config.verifier
        extra: dict[str, Any] = {"metadata": body.metadata or {}}
        response = ""
        if verifier == "image_tools_pivot":
            extra |= {"verifier": verifier, "settings": self.config.settings}
            # PivotRL scores one decision: the rollout's first turn with a call (else its last).
            response = next((t for t in turns if "<tool_call>" in t), turns[-1] if turns else "")
            turns = [response]
        elif body.base_reward is not None:
            extra["base_reward"] = body.base_reward
        ground_truth = body.ground_truth if body.ground_truth is not None else body.expected_answer
        try:
            scored = await session.reward(ground_truth, response=response, turns=turns,
                                          question=question_of(params), extra=extra)
        finally:
            await session.release()
        if scored.total is None:
            raise ValueError(f"toolserver could not score this rollout: {scored.error}")
        return ToolserverVerifyResponse(**body.model_dump(), reward=scored.total, reward_terms=scored.terms,
                                        reward_details=scored.details, reward_source=scored.source,
                                        toolserver_session_id=session.id)


if __name__ == "__main__":
    ToolserverImageToolsServer.run_webserver()
