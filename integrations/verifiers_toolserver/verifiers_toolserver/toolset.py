"""The rollout's tools: toolserver's MCP endpoint for the profile, bound to the rollout's toolserver session.

verifiers launches this Toolset once per rollout (a task-scoped tool server) and hands its URL to the harness. It
has no tool of its own: it lists the profile's tools as toolserver's `/mcp?profile=…` lists them and forwards each
call, unchanged, to `/mcp?profile=…&session=<id>`, where `<id>` is the session the task opened for this rollout
(`ToolserverState.session`, read over verifiers' state channel at each call). The model never sees or passes a
session handle; the results (image and text blocks, `isError`) and protocol errors are toolserver's own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx2
import verifiers.v1 as vf
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent, Tool
from pydantic import Field

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


class ToolserverState(vf.State):
    session: str | None = None
    """The toolserver session of this rollout (`POST /v1/sessions`), opened by the task's setup."""
    key: str | None = Field(default=None, repr=False)
    """toolserver's API key, where keys are on: the session belongs to it. It travels over verifiers' state channel
    (the trace never serializes its state), since verifiers' subprocess runtime strips `*API_KEY*` variables from
    the tool server's environment."""


class ToolserverToolsetConfig(vf.ToolsetConfig):
    toolserver: str = "http://127.0.0.1:8000"
    """toolserver's base URL."""
    profile: str = "default"
    """The profile whose tools the model gets."""


def headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def mcp_url(base: str, profile: str, session: str | None = None) -> str:
    """toolserver's MCP endpoint for `profile`, handles off (no `session` argument in the schemas: the session is
    bound by the URL)."""
    query = {"profile": profile, "handles": "off", **({"session": session} if session else {})}
    return f"{base.rstrip('/')}/mcp?{urlencode(query)}"


class ToolserverToolset(vf.Toolset[ToolserverToolsetConfig, ToolserverState]):
    TOOL_PREFIX = None  # the profile's tool names as its model was trained on them (no `toolserver_` prefix)

    def __init__(self, config: ToolserverToolsetConfig) -> None:
        super().__init__(config)
        self._tools: list[Tool] = []

    @contextlib.asynccontextmanager
    async def _client(self, session: str | None = None, key: str | None = None) -> AsyncIterator[Client]:
        url = mcp_url(self.config.toolserver, self.config.profile, session)
        async with (httpx2.AsyncClient(headers=headers(key), timeout=httpx2.Timeout(120, read=300)) as http,
                    Client(streamable_http_client(url, http_client=http)) as client):
            yield client

    def register(self, mcp: MCPServer) -> None:
        async def list_tools() -> list[Tool]:
            if not self._tools:  # listed once, with the rollout's key (its state holds it)
                async with self._client(key=self.state.key) as client:
                    self._tools = (await client.list_tools()).tools
            return self._tools

        async def forward(name: str, arguments: dict[str, Any]) -> CallToolResult:
            session = self.state.session
            if not session:
                return CallToolResult(content=[TextContent(type="text", text=(
                    "Error: this rollout has no toolserver session (the task's setup opens one)"))], is_error=True)
            async with self._client(session, self.state.key) as client:
                return await client.call_tool(name, arguments)

        call = self._with_state(forward)

        async def call_tool(name: str, arguments: dict[str, Any], context: Any = None) -> CallToolResult:
            result: CallToolResult = await call(name, arguments)
            return result

        # The profile's tools replace the decorated ones: list and call go to toolserver as they are.
        mcp.list_tools = self._with_state(list_tools)  # type: ignore[method-assign]
        mcp.call_tool = call_tool  # type: ignore[method-assign]


if __name__ == "__main__":
    ToolserverToolset.run()
