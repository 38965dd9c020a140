"""The rollout's tools: toolserver's MCP endpoint for the profile, bound to the rollout's toolserver session.

verifiers launches this Toolset once per rollout (a task-scoped tool server) and hands its URL to the harness. It
has no tool of its own: it lists the profile's tools as toolserver's `/mcp?profile=…` lists them and forwards each
call, unchanged, to `/mcp?profile=…&session=<id>`, where `<id>` is the session the task opened for this rollout
(`ToolserverState.session`, read over verifiers' state channel at each call). The model never sees or passes a
session handle; the results (image and text blocks, `isError`) and protocol errors are toolserver's own."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import httpx2
import verifiers.v1 as vf
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent, Tool

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


class ToolserverState(vf.State):
    session: str | None = None
    """The toolserver session of this rollout (`POST /v1/sessions`), opened by the task's setup."""


class ToolserverToolsetConfig(vf.ToolsetConfig):
    toolserver: str = "http://127.0.0.1:8000"
    """toolserver's base URL."""
    profile: str = "default"
    """The profile whose tools the model gets."""
    api_key_var: str = "TOOLSERVER_API_KEY"
    """The environment variable holding toolserver's API key, where the server has keys configured."""


def headers(api_key_var: str) -> dict[str, str]:
    key = os.environ.get(api_key_var)
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

    def _client(self, session: str | None = None) -> Client:
        http = httpx2.AsyncClient(headers=headers(self.config.api_key_var), timeout=httpx2.Timeout(120, read=300))
        return Client(streamable_http_client(mcp_url(self.config.toolserver, self.config.profile, session),
                                             http_client=http))

    async def setup(self) -> None:
        async with self._client() as client:
            self._tools = (await client.list_tools()).tools

    def register(self, mcp: MCPServer) -> None:
        async def list_tools() -> list[Tool]:
            return self._tools

        async def forward(name: str, arguments: dict[str, Any]) -> CallToolResult:
            session = self.state.session
            if not session:
                return CallToolResult(content=[TextContent(type="text", text=(
                    "Error: this rollout has no toolserver session (the task's setup opens one)"))], is_error=True)
            async with self._client(session) as client:
                return await client.call_tool(name, arguments)

        call = self._with_state(forward)

        async def call_tool(name: str, arguments: dict[str, Any], context: Any = None) -> CallToolResult:
            result: CallToolResult = await call(name, arguments)
            return result

        # The profile's tools replace the decorated ones: list and call go to toolserver as they are.
        mcp.list_tools = list_tools  # type: ignore[method-assign]
        mcp.call_tool = call_tool  # type: ignore[method-assign]


if __name__ == "__main__":
    ToolserverToolset.run()
