"""MCP endpoint (streamable HTTP, official `mcp` SDK) over the same core: `/mcp?profile=…`.

- `tools/list`: the profile's tools (the same JSON schemas as `/v1/tools`) plus `load_image`, which puts an
  image (base64, data URI, or a server path under an allowed root) into the session and returns its key.
- `tools/call`: text and image content blocks; a tool-level failure is `isError: true` with the same
  model-readable text the HTTP API returns; protocol problems are JSON-RPC errors.
- One toolserver session per MCP session (`Mcp-Session-Id`), created on first use with the profile from the
  URL, expiring with the MCP session's idle timeout and released when the client ends the MCP session. The MCP
  session id names its toolserver session in the session store (`stores.aliases`).

Where MCP sessions live (`mcp_sessions`): `process` (one replica) lets the SDK keep them, as it does, in this
process. `shared` (several replicas, Ray Serve) runs the SDK's stateless transport and issues the
`Mcp-Session-Id` itself on `initialize`: every request then stands alone, and since the id names the toolserver
session in the shared store, any replica serves any call of the MCP session. The endpoint answers a `GET` (the
optional server-to-client stream, which no tool here uses) with 405, as the protocol allows, and a `DELETE` by
releasing the session.

Images can also travel inline: wherever a tool of the default profile takes an image reference (`image`, `frames`), a
`data:` URI or an http(s) URL is loaded into the session first and replaced by its new key, and the result
ends with a text block naming that key. Clients that open a new MCP session for every call (langchain-mcp-
adapters, llama-index) and clients on the stateless protocol can so crop an image in a single call. Keys
cannot contain `:`, so such a value is never mistaken for a key.

The 2026-07-28 protocol has no sessions: there a session is a handle the call carries (its `session` argument
or the `Mcp-Param-Toolserver-Session` header; `open_session`, or a first `load_image`, opens one), shown to
2026-07-28 requests and, with `/mcp?handles=on`, to the per-call clients too (`integrations.mcp_handles`). A
call that names no session there runs in a throwaway one. The endpoint answers `server/discover` with "method not
found", so the SDK's `auto` clients keep the session-keeping handshake and see the tool lists they always saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from contextvars import Token
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from toolserver import __version__
from toolserver.core import Core, format_validation_error
from toolserver.errors import BadRequest, ServiceError, SessionGone
from toolserver.integrations import mcp_handles
from toolserver.models import CreateSessionRequest, ImageInput, OutputSettings
from toolserver.ownership import Keys, caller
from toolserver.profiles import get_profile
from toolserver.schema import loadable_schema
from toolserver.tools.args import image_reference_fields

MCP_SESSION_HEADER = "mcp-session-id"
ALIAS_SPACE = "mcp"  # MCP session ids, as names of toolserver sessions in the store
INLINE_PREFIXES = ("data:", "http://", "https://")  # an image reference that is an image itself, not a key


def _loadable(parameters: dict[str, Any], handles: bool) -> dict[str, Any]:
    schema = loadable_schema(parameters)
    return mcp_handles.with_handle(schema) if handles else schema


class McpEndpoint:
    """The MCP adapter: a lowlevel SDK server whose handlers call the core, and its ASGI entry point."""

    def __init__(self, core: Core, *, idle_timeout_s: float = 1800.0, allowed_hosts: list[str] | None = None,
                 keys: Keys | None = None, shared: bool = False):
        self.core = core
        self.keys = keys
        self.idle_timeout_s = idle_timeout_s
        self.shared = shared  # MCP sessions readable by every replica (see the module's docstring)
        self.aliases = core.store.aliases
        self._creating: dict[str, asyncio.Future[str]] = {}
        self.server: Server[Any] = Server("toolserver", version=__version__,
                                          instructions="Visual tools over a per-session memory of images.",
                                          on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        self.server.add_request_handler("server/discover", types.RequestParams, self._no_discover)
        security = (TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts,
                                              allowed_origins=[f"http://{h}" for h in allowed_hosts])
                    if allowed_hosts else TransportSecuritySettings(enable_dns_rebinding_protection=False))
        # JSON answers, not SSE: the SDK's clients cap one SSE event at 1 MiB, which a full-resolution image
        # block exceeds; JSON responses have no such cap. (No tool here streams progress.)
        self.manager = StreamableHTTPSessionManager(app=self.server, security_settings=security, json_response=True,
                                                    session_idle_timeout=None if shared else idle_timeout_s,
                                                    stateless=shared)
        self._asgi = StreamableHTTPASGIApp(self.manager)

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        mcp_session = headers.get(MCP_SESSION_HEADER.encode(), b"").decode("latin-1") or None
        method = scope.get("method")
        if self.shared and method == "GET":
            await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "Method Not Allowed: this server offers no server-to-client stream"}},
                status_code=405, headers={"Allow": "POST, DELETE"})(scope, receive, send)
            return
        if self.shared and method == "DELETE":
            await self._end(mcp_session)
            await JSONResponse(None, status_code=200 if mcp_session else 400)(scope, receive, send)
            return
        if self.shared and method == "POST" and mcp_session is None:
            receive, send = await self._issue_session_id(receive, send)
        await self._asgi(scope, receive, send)
        if method == "DELETE":  # the client ended its MCP session: free what it held
            await self._end(mcp_session)

    async def _end(self, mcp_session: str | None) -> None:
        session_id = await self.aliases.drop(ALIAS_SPACE, mcp_session) if mcp_session else None
        if session_id is not None:
            with contextlib.suppress(ServiceError):
                await self.core.release(session_id)

    @staticmethod
    async def _issue_session_id(receive: Receive, send: Send) -> tuple[Receive, Send]:
        """Shared mode: an `initialize` request's answer carries a new `Mcp-Session-Id`, as the SDK's stateful
        mode would give; the client sends it with every later request. The body is read (the app's body limit
        bounds it) and handed on unchanged."""
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        initialize = isinstance(parsed, dict) and parsed.get("method") == "initialize"
        session_id = uuid.uuid4().hex
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def send_with_id(message: Message) -> None:
            if initialize and message["type"] == "http.response.start" and message.get("status", 500) < 300:
                message = {**message, "headers": [*message.get("headers", []),
                                                  (MCP_SESSION_HEADER.encode(), session_id.encode())]}
            await send(message)

        return replay, send_with_id

    # -- handlers ----------------------------------------------------------------------------------
    async def _no_discover(self, ctx: Any, params: Any) -> Any:
        raise MCPError(types.METHOD_NOT_FOUND, "this endpoint keeps per-session state: use the initialize handshake, "
                       "or pin protocol 2026-07-28 and pass session handles")

    @staticmethod
    def _query(ctx: Any, name: str, default: str | None = None) -> str | None:
        request = getattr(ctx, "request", None)
        return request.query_params.get(name) or default if request is not None else default

    def _profile(self, ctx: Any) -> str:
        return self._query(ctx, "profile") or "default"

    def _handles(self, ctx: Any) -> bool:
        """Whether this request's tool list shows session handles (`?handles=`, integrations.mcp_handles)."""
        return mcp_handles.handles_shown(self._query(ctx, "handles") or "auto", getattr(ctx, "protocol_version", None))

    @staticmethod
    def _header(ctx: Any, name: str) -> str | None:
        request = getattr(ctx, "request", None)
        return request.headers.get(name) if request is not None else None

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        try:
            return self.tools_for(self._profile(ctx), handles=self._handles(ctx))
        except ServiceError as exc:
            raise MCPError(types.INVALID_PARAMS, exc.message) from None

    # -- the same tools and calls for OpenEnv's JSON-RPC over plain HTTP (toolserver.api.openenv.mcp) ------------
    def tools_for(self, profile: str, *, handles: bool = False) -> types.ListToolsResult:
        """`tools/list` of a profile (an unknown one raises its ServiceError); with `handles`, each tool takes a
        `session` argument and `open_session`/`close_session` come after `load_image`."""
        entries = self.core.list_tools(profile)
        tools = [types.Tool(name=e["function"]["name"], description=e["function"]["description"],
                            input_schema=_loadable(e["function"]["parameters"], handles)) for e in entries]
        extra = mcp_handles.handle_tools() if handles else []
        return types.ListToolsResult(tools=[mcp_handles.load_image_tool(handles), *extra, *tools])

    async def call_in(self, session_id: str | None, profile: str, name: str,
                      arguments: dict[str, Any]) -> types.CallToolResult:
        """`tools/call` in a session the caller holds, or, without one, in a throwaway session (as a stateless
        client's calls run)."""
        if session_id is None:
            return await self._stateless_call(profile, name, dict(arguments), shown=False)
        try:
            return await self._run(session_id, profile, name, dict(arguments))
        except ServiceError as exc:
            return mcp_handles.error(f"Error: {exc.message}")

    async def _new_session(self, profile: str) -> str:
        request = CreateSessionRequest(profile=profile, output=OutputSettings(delivery="inline"),
                                       ttl_s=self.idle_timeout_s)
        return (await self.core.create_session(request)).session_id

    async def _session_for(self, mcp_session: str, profile: str) -> str:
        session_id = await self.aliases.get(ALIAS_SPACE, mcp_session, self.idle_timeout_s)
        if session_id is not None:
            return session_id
        future = self._creating.get(mcp_session)
        if future is None:  # concurrent first calls of one MCP session here share one creation
            future = asyncio.ensure_future(self._name_new_session(mcp_session, profile))
            self._creating[mcp_session] = future
            future.add_done_callback(lambda _: self._creating.pop(mcp_session, None))
        return await asyncio.shield(future)

    async def _name_new_session(self, mcp_session: str, profile: str) -> str:
        """A new session named by `mcp_session`; if another replica named one first, that one (ours is released)."""
        created = await self._new_session(profile)
        session_id = await self.aliases.claim(ALIAS_SPACE, mcp_session, created, self.idle_timeout_s)
        if session_id != created:
            with contextlib.suppress(ServiceError):
                await self.core.release(created)
        return session_id

    def _as_caller(self, ctx: Any) -> Token[str | None]:
        """The calling key's view of the sessions: the SDK runs handlers outside the HTTP request's context."""
        request = getattr(ctx, "request", None)
        owner = None
        if self.keys and request is not None:
            owner = self.keys.identify(request.headers.get("authorization", ""))[1]
        return caller.set(owner)

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        token = self._as_caller(ctx)
        try:
            return await self._call_tool_as_caller(ctx, params)
        finally:
            caller.reset(token)

    async def _call_tool_as_caller(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        profile, name, arguments = self._profile(ctx), params.name, dict(params.arguments or {})
        try:
            get_profile(profile)
            shown = self._handles(ctx)
        except ServiceError as exc:
            raise MCPError(types.INVALID_PARAMS, exc.message) from None
        try:  # a handle by argument or header; else `/mcp?session=`, bound to every call on that URL
            handle = mcp_handles.take_handle(arguments, self._header(ctx, mcp_handles.SESSION_HEADER))
        except BadRequest as exc:
            return mcp_handles.error(f"Error: {exc.message}")
        if name == mcp_handles.OPEN_SESSION:
            if arguments:
                return mcp_handles.error(f"Error: open_session takes no arguments, not {', '.join(arguments)}")
            created = await self._new_session(profile)
            return mcp_handles.opened(created, f"Opened session `{created}`. Pass \"session\": \"{created}\" in every "
                                           "call that should work on its images.")
        if name == mcp_handles.CLOSE_SESSION:
            return await self._close(handle, shown)
        handle = handle or self._query(ctx, "session")
        if handle is not None:  # the caller's session: never created or released here
            return await self._in_handle(handle, profile, name, arguments, shown)
        # Where handles are shown, a session is a handle: the connection's own (per call, for the clients that
        # need handles) keeps nothing.
        mcp_session = None if shown else self._header(ctx, MCP_SESSION_HEADER)
        if mcp_session is None:
            return await self._stateless_call(profile, name, arguments, shown=shown)
        return await self._in_mcp_session(mcp_session, profile, name, arguments)

    async def _in_handle(self, handle: str, profile: str, name: str, arguments: dict[str, Any],
                         shown: bool) -> types.CallToolResult:
        try:
            return await self._run(handle, profile, name, arguments)
        except ServiceError as exc:
            return mcp_handles.error(mcp_handles.handle_refusal(handle, exc, hint=shown) or f"Error: {exc.message}")

    async def _close(self, handle: str | None, shown: bool) -> types.CallToolResult:
        if handle is None:
            return mcp_handles.error(f"Error: close_session needs the `{mcp_handles.SESSION_ARG}` to end")
        try:
            await self.core.release(handle)
        except ServiceError as exc:
            return mcp_handles.error(mcp_handles.handle_refusal(handle, exc, hint=shown) or f"Error: {exc.message}")
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"Closed session `{handle}`.")])

    async def _in_mcp_session(self, mcp_session: str, profile: str, name: str,
                              arguments: dict[str, Any]) -> types.CallToolResult:
        """A call of a handshake-era MCP session, in the toolserver session its `Mcp-Session-Id` names."""
        for attempt in range(2):
            session_id = await self._session_for(mcp_session, profile)
            try:
                return await self._run(session_id, profile, name, arguments)
            except SessionGone:
                # Expired or evicted while the MCP session lived on: start a fresh one once.
                await self.aliases.drop_if(ALIAS_SPACE, mcp_session, session_id)
                if attempt:
                    raise
            except ServiceError as exc:
                return mcp_handles.error(f"Error: {exc.message}")
        raise AssertionError("unreachable")

    async def _stateless_call(self, profile: str, name: str, arguments: dict[str, Any],
                              *, shown: bool) -> types.CallToolResult:
        """A call that names no session: `load_image` opens one where handles are shown (and answers its handle);
        any other tool runs in a throwaway session."""
        if name == mcp_handles.LOAD_IMAGE and not shown:
            return mcp_handles.error(
                "Error: this MCP connection has no session (protocol 2026-07-28), so an image cannot be kept between "
                "calls; pass it inline in the tool's image argument (a data: URI or a URL), connect with the "
                "initialize handshake, or use session handles (/mcp?handles=on: open_session, then `session` in "
                "every call).")
        session_id = await self._new_session(profile)
        if name == mcp_handles.LOAD_IMAGE:
            result = await self.call_in(session_id, profile, name, arguments)
            if result.is_error:
                with contextlib.suppress(ServiceError):
                    await self.core.release(session_id)
                return result
            said = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
            return mcp_handles.opened(session_id, f"{said} It is in a new session: pass \"session\": "
                                                  f"\"{session_id}\" in every later call.")
        try:
            result = await self._run(session_id, profile, name, arguments)
        except ServiceError as exc:
            return mcp_handles.error(f"Error: {exc.message}")
        finally:
            with contextlib.suppress(ServiceError):
                await self.core.release(session_id)
        if result.is_error and shown:
            result.content.append(types.TextContent(type="text", text=(
                "(This call named no session, so it ran in an empty one: pass `session`, from open_session or "
                "load_image, to work on your images.)")))
        return result

    async def _run(self, session_id: str, profile: str, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """One call in a session: `load_image`, or a tool whose inline images are loaded first."""
        if name == mcp_handles.LOAD_IMAGE:
            return await self._load_image(session_id, arguments)
        loaded = await self._load_inline_images(session_id, profile, name, arguments)
        called = await self.core.call_tool(session_id, name, arguments)
        server_text = get_profile(profile).mcp_text  # the reference's MCP server answers otherwise than its trainer
        result = mcp_handles.content(called, server_text(called.text, called.ok) if server_text else called.text)
        if loaded:
            named = ", ".join(f"`{key}`" for key in loaded)
            result.content.append(types.TextContent(type="text", text=f"(Inline images stored as {named}.)"))
        return result

    async def _load_inline_images(self, session_id: str, profile: str, name: str,
                                  arguments: dict[str, Any]) -> list[str]:
        """Replaces each inline image (a data: URI or URL) in the tool's image arguments by the key it is stored
        under, in place; returns those keys. The same inline image given twice is stored once."""
        tool = get_profile(profile).tool(name)
        fields = image_reference_fields(tool.Args) if tool is not None else {}
        keys: dict[str, str] = {}

        async def stored(value: Any) -> Any:
            if not (isinstance(value, str) and value.startswith(INLINE_PREFIXES)):
                return value
            if value not in keys:
                source = ImageInput(data=value) if value.startswith("data:") else ImageInput(url=value)
                added = await self.core.add_images(session_id, [source])
                if added.videos:
                    raise BadRequest("an inline video cannot stand for one image: load it with load_image and "
                                     "refer to its frames by key", code="inline_video")
                keys[value] = added.images[0].key
            return keys[value]

        for field_name, is_list in fields.items():
            if field_name not in arguments:
                continue
            value = arguments[field_name]
            if is_list and isinstance(value, list):
                arguments[field_name] = [await stored(item) for item in value]
            elif not is_list:
                arguments[field_name] = await stored(value)
        return list(keys.values())

    async def _load_image(self, session_id: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            image = mcp_handles.load_image_input(arguments)
        except ValidationError as exc:
            return mcp_handles.error(format_validation_error(mcp_handles.LOAD_IMAGE, exc))
        added = await self.core.add_images(session_id, [image])
        return types.CallToolResult(content=[types.TextContent(type="text", text=mcp_handles.loaded_text(added))])
