"""MCP at `/openenv/{profile}/mcp`, for both kinds of client:

- MCP's own clients (the SDK's streamable HTTP: an `initialize` handshake, then `Mcp-Session-Id`) reach the
  server's MCP endpoint (`toolserver.mcp_server`, as `/mcp?profile=<profile>`), unchanged.
- OpenEnv's production-mode client (`openenv.core.mcp_client.MCPClientBase`) posts plain JSON-RPC with no handshake:
  `openenv/session/create` (its params may carry reset inputs: `images`, `texts`, `settings`), `tools/list`,
  `tools/call` with a `session_id` in its params (without one the call runs in a throwaway session), and
  `openenv/session/close`. These are answered here with the MCP endpoint's own tool list and calls, in OpenEnv's
  JSON-RPC shapes (`http_server.py`'s `mcp_handler`): each created session holds an episode slot until closed or
  expired.

A request goes to the SDK when it carries `Mcp-Session-Id` or `MCP-Protocol-Version`, is not a POST, or is an
`initialize` (or a batch); every other POST is OpenEnv's dialect.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from toolserver import jsonio
from toolserver.api.openenv.episode import Episode
from toolserver.core import Core
from toolserver.core.episodes import CapacityReached
from toolserver.errors import ServiceError
from toolserver.integrations.mcp_handles import LOAD_IMAGE
from toolserver.mcp_server import McpEndpoint
from toolserver.ownership import caller
from toolserver.profiles import get_profile

log = logging.getLogger("toolserver")
PARSE_ERROR, INTERNAL_ERROR = -32700, -32603
INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVER_ERROR = -32600, -32601, -32602, -32000


class _RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class OpenEnvMcp:
    def __init__(self, core: Core, endpoint: McpEndpoint):
        self.core = core
        self.endpoint = endpoint
        self.sessions: dict[str, tuple[Episode, str | None]] = {}  # session id -> its episode and owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        profile = scope["path_params"]["profile"]
        request = Request(scope, receive)
        headers = request.headers
        if scope["method"] != "POST" or "mcp-session-id" in headers or "mcp-protocol-version" in headers:
            await self._to_sdk(scope, receive, send, profile, None)
            return
        body = await request.body()
        try:
            message = jsonio.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            await JSONResponse(_failure(None, PARSE_ERROR, "Parse error"))(scope, receive, send)
            return
        if not isinstance(message, dict) or message.get("method") == "initialize":
            await self._to_sdk(scope, receive, send, profile, body)
            return
        await JSONResponse(await self.rpc(profile, message))(scope, receive, send)

    async def _to_sdk(self, scope: Scope, receive: Receive, send: Send, profile: str, body: bytes | None) -> None:
        query = [part for part in scope.get("query_string", b"").decode("latin-1").split("&")
                 if part and not part.startswith("profile=")]
        scope = {**scope, "path": "/mcp", "query_string": "&".join([*query, f"profile={profile}"]).encode()}
        if body is not None:  # read already: handed on as it came
            sent = False

            async def replay() -> Message:
                nonlocal sent
                if sent:
                    return await receive()
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            await self.endpoint(scope, replay, send)
        else:
            await self.endpoint(scope, receive, send)

    async def rpc(self, profile: str, message: dict[str, Any]) -> dict[str, Any]:
        request_id = message.get("id")
        try:
            method, params = _request(message)
            try:
                get_profile(profile)
            except ServiceError as exc:
                raise _RpcError(INVALID_PARAMS, exc.message) from None
            return {"jsonrpc": "2.0", "id": request_id, "result": await self._method(profile, method, params)}
        except _RpcError as exc:
            return _failure(request_id, exc.code, exc.message, exc.data)
        except ServiceError as exc:  # the core could not serve it (overload, store outage)
            return _failure(request_id, SERVER_ERROR, exc.message, {"code": exc.code})
        except Exception:
            log.exception("OpenEnv MCP request failed")
            return _failure(request_id, INTERNAL_ERROR, "Internal error")

    async def _method(self, profile: str, method: str, params: dict[str, Any]) -> Any:
        if method == "openenv/session/create":
            return {"session_id": await self._create(profile, params)}
        if method == "openenv/session/close":
            session_id = self._known(params, required=True)
            assert session_id is not None
            episode, _ = self.sessions.pop(session_id)
            await episode.close()
            self.core.episodes.give_back()
            return {"session_id": session_id, "closed": True}
        if method == "tools/list":
            return self.endpoint.tools_for(profile).model_dump(mode="json", by_alias=True, exclude_none=True)
        if method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not name:
                raise _RpcError(INVALID_PARAMS, "Missing 'name' in params")
            if not isinstance(arguments, dict):
                raise _RpcError(INVALID_PARAMS, "'arguments' must be an object")
            if name != LOAD_IMAGE and get_profile(profile).tool(name) is None:
                raise _RpcError(INVALID_PARAMS, f"Tool not found: {name}")
            result = await self.endpoint.call_in(self._known(params), profile, name, arguments)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)
        raise _RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def _create(self, profile: str, params: dict[str, Any]) -> str:
        try:
            await self._take_slot()
        except CapacityReached as exc:
            raise _RpcError(SERVER_ERROR, exc.message, {"active_sessions": exc.active,
                                                        "max_sessions": exc.limit}) from None
        episode = Episode(self.core, profile)
        inputs = {k: v for k, v in params.items() if k != "session_id"}
        settings = inputs.setdefault("settings", {})
        if isinstance(settings, dict):
            settings.setdefault("ttl_s", self.core.settings.mcp_idle_timeout_s)  # idle sessions end, as on /mcp
        try:
            await episode.reset(inputs)
        except Exception as exc:
            self.core.episodes.give_back()
            message = exc.message if isinstance(exc, ServiceError) else f"Invalid params: {exc}"
            raise _RpcError(INVALID_PARAMS, message) from None
        assert episode.session_id is not None
        self.sessions[episode.session_id] = (episode, caller.get())
        return episode.session_id

    async def _take_slot(self) -> None:
        """A slot, after giving back those of created sessions that expired unclosed."""
        try:
            self.core.episodes.take()
            return
        except CapacityReached:
            pass
        for session_id, (episode, _) in list(self.sessions.items()):
            if not await self.core.store.holds(session_id):
                self.sessions.pop(session_id, None)
                episode.session_id = None
                self.core.episodes.give_back()
        self.core.episodes.take()

    def _known(self, params: dict[str, Any], *, required: bool = False) -> str | None:
        session_id = params.get("session_id")
        if session_id is None and not required:
            return None
        if not isinstance(session_id, str) or not session_id:
            raise _RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
        held = self.sessions.get(session_id)
        who = caller.get()
        if held is None or (who is not None and held[1] != who):  # another key's sessions are not there for it
            raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {session_id}")
        return session_id


def _request(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    method, params = message.get("method"), message.get("params", {})
    if message.get("jsonrpc") != "2.0" or not isinstance(method, str):
        raise _RpcError(INVALID_REQUEST, "Invalid request: a JSON-RPC 2.0 request needs 'jsonrpc' and 'method'")
    if not isinstance(params, dict):
        raise _RpcError(INVALID_PARAMS, "Params must be an object")
    return method, params


def _failure(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}

