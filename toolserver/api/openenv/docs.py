"""The OpenEnv WebSocket protocol in the OpenAPI document (and so on `/docs`): OpenAPI has no WebSocket operations,
so the channel is described AsyncAPI-style in the `openenv` tag's description (what the client sends, what the
server answers, the error codes), and every message is a schema under `components`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from toolserver.api.openenv.wire import (
    CloseMessage,
    EpisodeAction,
    EpisodeObservation,
    EpisodeState,
    ErrorReply,
    ObservationReply,
    ResetInputs,
    ResetMessage,
    StateMessage,
    StateReply,
    StepMessage,
    StepRequest,
)

MESSAGES: tuple[type[BaseModel], ...] = (ResetMessage, StepMessage, StateMessage, CloseMessage, ObservationReply,
                                         StateReply, ErrorReply, EpisodeAction, EpisodeObservation, EpisodeState,
                                         ResetInputs, StepRequest)

CHANNEL = """
Every profile is an [OpenEnv](https://github.com/meta-pytorch/OpenEnv) environment: point `openenv-core`'s
`GenericEnvClient(base_url="http://HOST:PORT/openenv/<profile>")` here. The HTTP routes below are OpenEnv's
one-shot calls and its discovery routes; episodes live on the WebSocket.

### Channel `WS /openenv/{profile}/ws` (AsyncAPI-style)

One connection is one episode, and one toolserver session (released by `close`, by the next `reset`, or when the
connection ends). Messages are JSON text frames, answered one at a time in order. With API keys configured the
handshake carries `Authorization: Bearer <key>` (without it: HTTP 403).

{messages}

`ObservationReply.data` is `{"observation": {"messages", "prompt", "metadata"}, "reward": null, "done": bool,
"metadata"}` (the observation's `metadata` again, as `openenv` 0.10 sends it):
`messages` are the profile's messages to append (each image once, as a data URL), `prompt` the raw text a
raw-text system appends, `done` the profile's own rule, `metadata` the session id and the calls' results.
A text turn runs exactly as `POST /v1/sessions/{id}/act`; a structured call as
`POST /v1/sessions/{id}/tools/{name}`, rendered as `/act` renders a turn holding that call.

Every bad message is answered with an `ErrorReply` (`{"type": "error", "data": {"message", "code", …}}`) and the
episode goes on:

{codes}

A tool's own failure (a box outside the image) is not an error message: it is the profile's text in `messages`
(and `ok: false` in `metadata.results`), for the model to read.

### MCP at `/openenv/{profile}/mcp`

MCP clients (streamable HTTP) as on `/mcp?profile=<profile>`, and OpenEnv's JSON-RPC over plain HTTP POST:
`openenv/session/create` (params: reset inputs), `tools/list`, `tools/call` (params: `name`, `arguments`,
`session_id`), `openenv/session/close` (params: `session_id`).
"""

MESSAGE_ROWS = [
    ("client sends", "schema", "server answers"),
    ('`{"type": "reset", "data": {images, texts, episode_id, seed, settings, …columns}}`',
     "`ResetMessage` (`data`: `ResetInputs`)", "`ObservationReply`"),
    ('`{"type": "step", "data": {"text": "<model turn>"}}` or '
     '`{"type": "step", "data": {"tool_name": …, "arguments": {…}}}`',
     "`StepMessage` (`data`: the profile's `EpisodeAction`, see `GET /openenv/{profile}/schema`)",
     "`ObservationReply`"),
    ('`{"type": "state"}`', "`StateMessage`", "`StateReply` (`EpisodeState`)"),
    ('`{"type": "close"}`', "`CloseMessage`", "the server closes the connection"),
]
CODE_ROWS = [
    ("code", "when"),
    ("`INVALID_JSON`", "the frame is not JSON"),
    ("`UNKNOWN_TYPE`", "a `type` other than the four above"),
    ("`VALIDATION_ERROR`", "a message or action that does not validate (`errors`: pydantic's list; an unknown "
     "`tool_name` is one), a reset input the service refuses (an image that does not decode, over a limit), a frame "
     "over `openenv_max_message_bytes`"),
    ("`EXECUTION_ERROR`", "a step before any reset, or the service could not serve it (overload: `retry_after_s`)"),
    ("`SESSION_ERROR`", "the episode's session expired or was released"),
    ("`CAPACITY_REACHED`", "sent on connecting when `openenv_max_episodes` episodes are open (`active_sessions`, "
     "`max_sessions`); the server then closes"),
    ("`FACTORY_ERROR`", "sent on connecting to an unknown profile; the server then closes"),
]


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "---|" * len(rows[0]))
    return "\n".join(lines)


OPENENV_HTTP_VERSION = "1.0.0"  # the OpenEnv HTTP API served (`info.version` of OpenEnv's own servers)
PREFIX = "/openenv/{profile}"


def environment_document(schema: dict[str, Any], profile: str, version: str) -> dict[str, Any]:
    """One environment's OpenAPI document, as OpenEnv's own server serves `/openapi.json` (`openenv validate --url`
    reads the API version and the routes from it): the `/openenv/{profile}` routes of the server's document, relative
    to the environment's base URL, with the schemas they refer to."""
    paths: dict[str, Any] = {}
    for path, operations in schema.get("paths", {}).items():
        if not path.startswith(PREFIX + "/") or path == PREFIX + "/openapi.json":
            continue
        paths[path.removeprefix(PREFIX)] = {
            method: {**operation, "parameters": [p for p in operation.get("parameters", [])
                                                 if not (p.get("in") == "path" and p.get("name") == "profile")]}
            for method, operation in operations.items()}
    components = schema.get("components", {}).get("schemas", {})
    wanted: dict[str, Any] = {}
    pending = _refs(paths)
    while pending:
        name = pending.pop()
        if name not in wanted and name in components:
            wanted[name] = components[name]
            pending |= _refs(components[name])
    return {"openapi": schema.get("openapi", "3.1.0"),
            "info": {"title": f"toolserver: {profile}", "version": OPENENV_HTTP_VERSION,
                     "description": f"The `{profile}` profile of toolserver {version} as an OpenEnv environment."},
            "paths": paths, "components": {"schemas": wanted}}


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def document_openenv(schema: dict[str, Any]) -> None:
    """Adds the channel's description to the `openenv` tag and its messages to `components.schemas`."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in MESSAGES:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in model_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components.setdefault(model.__name__, model_schema)
    # Tags in the order their operations come (as the page shows them without a list), the channel on `openenv`.
    names = list(dict.fromkeys(tag for path in schema.get("paths", {}).values() for operation in path.values()
                               for tag in operation.get("tags", [])))
    listed = {tag["name"] for tag in schema.get("tags", [])}
    schema.setdefault("tags", []).extend({"name": name} for name in names if name not in listed)
    for tag in schema["tags"]:
        if tag["name"] == "openenv":
            tag["description"] = CHANNEL.strip().replace("{messages}", _table(MESSAGE_ROWS)).replace(
                "{codes}", _table(CODE_ROWS))
