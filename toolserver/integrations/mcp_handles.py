"""Session handles for MCP (`toolserver.mcp_server`): what the tool list shows and what a call carries when a
session travels as an argument instead of as the connection's `Mcp-Session-Id`.

The 2026-07-28 revision has no sessions (no `initialize`, no `Mcp-Session-Id`), and clients that open an MCP
session per call (langchain-mcp-adapters' `get_tools()`, llama-index's `BasicMCPClient`) lose the connection's
state between calls. There, a session is a handle: `open_session` (or a first `load_image`) opens one and answers
its handle, and every later call passes it as its `session` argument. The argument's schema carries the
`x-mcp-header` annotation `Toolserver-Session`, so a 2026-07-28 client also sends it as the
`Mcp-Param-Toolserver-Session` header (a load balancer can route on it); a client that cannot add arguments may
send that header itself on every request instead.

A handle is the toolserver session's id: 192 random bits, owned by the API key that opened it (a foreign key's
handle reads as no session at all, as on `/v1/sessions`), refused with its reason once closed or expired.

Which connections see handles (`/mcp?handles=`): `auto` (default) shows them to 2026-07-28 requests only, so the
handshake-era tool lists stay exactly as they were; `on` shows them to every client (the per-call clients);
`off` to none. Where they are shown, a call's session is its handle: one that names none runs in a throwaway
session (`load_image` opens one and answers its handle), whatever `Mcp-Session-Id` the connection has. A handle
given by argument or header is honoured whatever the listing shows.
"""

from __future__ import annotations

import re
from typing import Any

import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field

from toolserver.errors import BadRequest, NotFound, ServiceError, SessionGone
from toolserver.messages import image_base64
from toolserver.models import AddedImages, ImageInput, ImageKey, ToolResult
from toolserver.schema import parameters_schema

SESSION_ARG = "session"  # reserved: no tool of a profile may name an argument so
HEADER_TOKEN = "Toolserver-Session"  # the `x-mcp-header` annotation of SESSION_ARG
SESSION_HEADER = f"Mcp-Param-{HEADER_TOKEN}"  # what 2026-07-28 clients send it as
LOAD_IMAGE, OPEN_SESSION, CLOSE_SESSION = "load_image", "open_session", "close_session"
HANDLES_MODES = ("auto", "on", "off")
_HANDLE = re.compile(r"^[A-Za-z0-9_-]{32}$")  # secrets.token_urlsafe(24), the stores' session ids


class LoadImageArgs(BaseModel):
    """Load an image into this session and get back the key that tools use to refer to it. A video (MP4, WebM,
    MKV) becomes its sampled frames, each an image with its own key."""

    model_config = ConfigDict(extra="forbid")
    data: str | None = Field(default=None, description="The image or video as base64 or a `data:` URI.")
    path: str | None = Field(default=None, description="A file on the server, under an allowed root.")
    url: str | None = Field(default=None, description="An http(s) URL the server fetches.")
    key: ImageKey | None = Field(default=None, description="The key to store it under; default: the profile's "
                                 "next key.")
    frames_per_second: float | None = Field(default=None, gt=0, le=120,
                                            description="Videos: frames taken per second (default 2).")
    max_frames: int | None = Field(default=None, ge=1, description="Videos: the most frames to take (default 32).")


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def session_property(required: bool = False) -> dict[str, Any]:
    text = ("The handle of your session, from open_session (or the first load_image). Pass it in every call: "
            "images live in the session it names.") if required else (
            "Your session's handle, from open_session (or the first load_image). Pass it in every call: without "
            "it the call runs in a new, empty session that keeps nothing.")
    return {"type": "string", "description": text, "x-mcp-header": HEADER_TOKEN}


def with_handle(schema: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    """A tool's input schema with the `session` argument added last (the tool's own arguments as they were)."""
    properties = {**schema.get("properties", {}), SESSION_ARG: session_property(required)}
    out = {**schema, "properties": properties}
    if required:
        out["required"] = [*schema.get("required", []), SESSION_ARG]
    return out


def load_image_tool(handles: bool) -> types.Tool:
    schema = parameters_schema(LoadImageArgs)
    return types.Tool(name=LOAD_IMAGE, description=(LoadImageArgs.__doc__ or "").strip() +
                      " Give exactly one of `data`, `path` or `url`." +
                      (" Without `session`, a new session is opened and its handle answered." if handles else ""),
                      input_schema=with_handle(schema) if handles else schema)


def handle_tools() -> list[types.Tool]:
    empty = parameters_schema(_NoArgs)
    return [types.Tool(name=OPEN_SESSION, input_schema=empty, description=(
                "Open a session: a memory of images the tools work on. Answers its handle; pass it as `session` "
                "in every later call. It ends after a long idle time, or with close_session.")),
            types.Tool(name=CLOSE_SESSION, input_schema=with_handle(empty, required=True),
                       description="End a session and free its images; its handle is refused afterwards.")]


def handles_shown(mode: str, protocol_version: str | None) -> bool:
    if mode not in HANDLES_MODES:
        raise BadRequest(f"handles must be one of {', '.join(HANDLES_MODES)}, not {mode!r}", code="invalid_request")
    return mode == "on" or (mode == "auto" and protocol_version in MODERN_PROTOCOL_VERSIONS)


def take_handle(arguments: dict[str, Any], header: str | None) -> str | None:
    """The handle a call names (its `session` argument, else the header), removed from the tool's arguments."""
    given = arguments.pop(SESSION_ARG, None)
    if given is not None and not isinstance(given, str):
        raise BadRequest(f"`{SESSION_ARG}` must be a session handle (a string)")
    if given is not None and header is not None and given != header:
        raise BadRequest(f"the `{SESSION_ARG}` argument and the {SESSION_HEADER} header name different sessions")
    handle = given if given is not None else header
    if handle is not None and not _HANDLE.match(handle):
        raise BadRequest(f"no session {handle}: a session handle is the 32 characters open_session answers")
    return handle


def handle_refusal(handle: str, exc: ServiceError, *, hint: bool) -> str | None:
    """The model-readable refusal of a handle that names no usable session (None: `exc` is about something else)."""
    again = " Open a new one with open_session." if hint else ""
    if isinstance(exc, SessionGone):
        told, renew = exc.message, "create a new session"
        if hint and told.endswith(renew):
            told = told.removesuffix(renew) + "open a new one with open_session"
        return f"Error: {told}."
    if isinstance(exc, NotFound) and exc.code == "unknown_session":
        return f"Error: no session {handle}: the handle is unknown, was closed, or belongs to another API key.{again}"
    return None


def load_image_input(arguments: dict[str, Any]) -> ImageInput:
    """`load_image`'s arguments as an input (a ValidationError names what is wrong)."""
    args = LoadImageArgs.model_validate(arguments)
    return ImageInput(data=args.data, path=args.path, url=args.url, key=args.key,
                      frames_per_second=args.frames_per_second, max_frames=args.max_frames)


def loaded_text(added: AddedImages) -> str:
    if added.videos:
        video, first, last = added.videos[0], added.images[0], added.images[-1]
        times = ", ".join(f"{t:g}" for t in video.timestamps_s)
        return (f"Loaded a {video.duration_s:g}-second video as {len(added.images)} frames, `{first.key}` to "
                f"`{last.key}` (indices {first.index} to {last.index}, {first.width}x{first.height} pixels), "
                f"taken at {times} s.")
    info = added.images[0]
    return f"Loaded image `{info.key}` (index {info.index}, {info.width}x{info.height} pixels)."


def opened(handle: str, text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content={SESSION_ARG: handle})


def content(result: ToolResult, text: str | None = "") -> types.CallToolResult:
    """`text` (None: no text block) replaces the result's text where the profile's MCP server answers its own."""
    text = result.text if text == "" else text
    images = [types.ImageContent(type="image", data=image_base64(image), mime_type=image.mime)
              for image in result.images if image.data is not None]
    # Images first: some MCP clients keep only a result's first block (smolagents' adapter, mcpadapt), and for
    # an image tool the image is what the model must see. A tool whose reference returns the image alone
    # (DeepEyes, Qwen-Agent) has no text: no empty text block.
    blocks: list[Any] = list(images)
    if text or (text is not None and not images):
        blocks.append(types.TextContent(type="text", text=text))
    return types.CallToolResult(content=blocks, is_error=not result.ok)


def error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
