"""Tool calls: one call at a time per session, read the way the session's profile reads arguments, run in the
work pool under a deadline, delivered, and written to the session's call log."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from PIL import Image
from pydantic import BaseModel, ValidationError

from toolserver.arguments import read_arguments
from toolserver.core.delivery import Delivered, Delivery
from toolserver.core.results import failure, format_validation_error
from toolserver.core.shared_views import ComputedElsewhere
from toolserver.core.wiring import Services
from toolserver.errors import BadRequest, Conflict, SessionGone, TooLarge, ToolFailure
from toolserver.imaging import decode_image
from toolserver.memorymap import Blob, CallCommit, ImageEntry, RecordedOutcome, SessionMap
from toolserver.messages import tool_messages
from toolserver.models import OpenAIToolCall, ToolCallsResponse, ToolResult
from toolserver.profiles import get_profile
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_RECORD_CHARS = 64_000  # one call record; longer arguments are kept as the start of their JSON
MAX_RECORD_TEXT = 20_000
WAITS_FOR_SHARED = 2  # times a call gives its worker back to wait for an image another session is computing


@dataclass(frozen=True)
class IdempotencyKey:
    """Names one call, so that a retry returns the recorded result instead of running the tool again.
    `strict`: reusing the key for another tool or other arguments is refused (409), as for a client's own key;
    otherwise (a tool-call id) it is taken as a new call."""

    value: str
    strict: bool = True


@dataclass
class _Ran:
    result: ToolResult
    entries: list[ImageEntry] = field(default_factory=list)
    blobs: list[Blob] = field(default_factory=list)
    counted: bool = True


class ToolCalls:
    def __init__(self, services: Services, delivery: Delivery):
        self.services = services
        self.settings = services.settings
        self.delivery = delivery

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any] | str | None,
                        *, base_url: str = "", binary: bool = False,
                        idempotency_key: IdempotencyKey | None = None) -> ToolResult:
        """One call. `binary`: inline images come back as bytes, not base64 (for a msgpack answer)."""
        store, metrics = self.services.store, self.services.metrics
        async with store.exclusive(session_id) as session:
            fingerprint = call_fingerprint(name, arguments) if idempotency_key else ""
            if idempotency_key is not None:
                recorded = await store.recorded_outcome(session, idempotency_key.value)
                if recorded is not None and recorded.fingerprint == fingerprint:
                    metrics.tool_replays.inc()
                    return await self.delivery.replay(session, recorded, binary)
                if recorded is not None and idempotency_key.strict:
                    raise Conflict(f"idempotency key {idempotency_key.value!r} was used for another call in this "
                                   "session", code="idempotency_key_reused")
            started, started_at = time.perf_counter(), time.time()
            ran = await self._call_locked(session, name, arguments, base_url, binary)
            result = await self._commit(session, name, arguments, ran, started, started_at,
                                        idempotency_key, fingerprint)
            outcome = "ok" if result.ok else "error"
            metrics.tool_calls.labels(result.tool, outcome).inc()
            if result.error:
                metrics.tool_errors.labels(result.tool, result.error.code).inc()
            metrics.tool_latency.labels(result.tool).observe(time.perf_counter() - started)
            return result

    async def _commit(self, session: SessionMap, name: str, arguments: Any, ran: _Ran, started: float,
                      started_at: float, key: IdempotencyKey | None, fingerprint: str) -> ToolResult:
        """The call's effect written at once; a call whose images no longer fit is committed as that failure."""
        for attempt in range(2):
            record = call_record(name, arguments, ran.result, started_at, time.perf_counter() - started)
            outcome = None if key is None else RecordedOutcome(key.value, fingerprint, outcome_json(ran.result))
            try:
                await self.services.store.commit_call(session, CallCommit(ran.entries, ran.blobs, ran.counted,
                                                                          record, outcome))
                return ran.result
            except TooLarge as exc:
                if attempt:
                    raise
                ran = _Ran(failure(name, f"Error: {exc.message}", "session_full"), counted=ran.counted)
            except SessionGone:
                return failure(name, "Error: the session ended while the tool ran.", "session_gone")
        raise AssertionError("unreachable")

    async def execute_tool_calls(self, session_id: str, tool_calls: Sequence[OpenAIToolCall],
                                 image_message: str = "tool", *, base_url: str = "") -> ToolCallsResponse:
        """Run OpenAI `tool_calls` in order; returns the messages to append and the raw results. Each call's id
        is its idempotency key: a retried request returns what the calls it already ran returned."""
        check_renderable(await self.services.store.get(session_id))
        results = []
        for call in tool_calls:
            results.append(await self.call_tool(session_id, call.function.name, call.function.arguments,
                                                base_url=base_url,
                                                idempotency_key=IdempotencyKey(f"tool_call:{call.id}", strict=False)))
        messages = tool_messages([c.id for c in tool_calls], results, image_message)
        return ToolCallsResponse(messages=messages, results=results)

    async def _call_locked(self, session: SessionMap, name: str, arguments: Any, base_url: str,
                           binary: bool = False) -> _Ran:
        store, s = self.services.store, self.settings
        profile = get_profile(session.settings.profile)
        tool = profile.tool(name)
        if tool is None:
            return _Ran(failure(name, profile.unknown_tool_text(name), "unknown_tool"), counted=False)
        limit = session.settings.max_tool_calls
        if limit is None:
            limit = profile.max_tool_calls
        if limit is not None and session.tool_calls >= limit:
            return _Ran(failure(name, profile.limit_message.format(limit=limit), "call_limit"), counted=False)
        try:  # the way the profile's system reads arguments, at every entry point
            arguments = read_arguments(profile.arguments, name, arguments, tool.validation_schema)
        except ToolFailure as exc:
            return _Ran(failure(name, exc.text, exc.code))
        args = _parse_args(tool, arguments)
        if isinstance(args, ToolResult):
            return _Ran(args)
        log = (await store.call_log(session))[0] if profile.reads_call_log else []
        try:
            ctx, (output, delivered, stored) = await self._run_tool(session, tool, args, binary, tuple(log))
        except TimeoutError:
            return _Ran(failure(name, f"Error: {name} did not finish within {s.tool_timeout_s:g} s.", "timeout"))
        if ctx.new_views:
            await store.keep_views(session, ctx.new_views)
            if not profile.reads_originals and not store.stores_encoded:
                drop_originals(ctx.new_views, str(profile.alpha))
        result, entries = self.delivery.build_output(session, name, output, delivered, base_url)
        return _Ran(result, entries, stored)

    async def _run_tool(self, session: SessionMap, tool: Tool, args: Any, binary: bool,
                        log: tuple[str, ...] = ()) -> tuple[ToolContext, tuple[ToolOutput, list[Delivered],
                                                                              list[Blob]]]:
        """The tool in the work pool, then its encodings. A tool that needs an image another session is computing
        (`SharedViews`) gives its worker back and runs again once that image is made, rather than holding a
        worker while it waits (a GRPO step's first calls would otherwise queue behind one view at a time); its
        last attempt waits in its worker. Tools are pure functions of their context, so running one again is
        safe. Raises TimeoutError past the tool timeout."""
        s, store, shared = self.settings, self.services.store, self.services.shared
        deadline = time.monotonic() + s.tool_timeout_s
        output_settings = session.settings.output
        awaited: list[Future[Image.Image]] = []  # holds what was awaited (its image) until the call has run
        for attempt in range(WAITS_FOR_SHARED + 1):
            ctx = ToolContext.of(session, sr=self.services.sr, documents=self.services.documents,
                                 sandbox=self.services.sandbox, search_cache=self.services.search_cache,
                                 perception=self.services.perception,
                                 sr_max_output_pixels=s.sr_max_output_pixels,
                                 deadline=deadline, cached_view=store.view_lookup(session),
                                 view_maker=store.view_maker(session), calls=log,
                                 share=partial(shared.image, defer=attempt < WAITS_FOR_SHARED),
                                 pixels_on_demand=output_settings.delivery == "ref" and store.keeps_recipes())
            try:
                return ctx, await self.services.pool.run(
                    self.delivery.run_and_encode, tool, ctx, args, output_settings.format, output_settings.delivery,
                    store.stores_encoded, binary, timeout=max(0.0, deadline - time.monotonic()), lane=tool.lane)
            except ComputedElsewhere as elsewhere:
                awaited.append(elsewhere.future)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(elsewhere.future)),
                                           max(0.0, deadline - time.monotonic()))
                if time.monotonic() >= deadline:
                    raise TimeoutError from None
        raise AssertionError("unreachable")


def check_renderable(session: SessionMap) -> None:
    """Messages carry images as data URLs, URLs or files; `shm` delivery's raw pixels are none of those, so a
    session delivering by `shm` is refused before any call runs (use `POST .../tools/{name}` there)."""
    if session.settings.output.delivery == "shm":
        raise BadRequest("this session delivers images by `shm` (raw pixels in shared memory), which a chat message "
                         "cannot carry; call tools one at a time (POST /v1/sessions/{id}/tools/{name}), or create the "
                         "session with inline, ref or path delivery", code="shm_not_renderable")


def drop_originals(views: Sequence[tuple[ImageEntry, str, Image.Image]], alpha: str) -> None:
    """Inputs whose view is now held: their decoded originals go (38 MB for a 12 MP photo); decoding the upload
    again gives the same pixels, should anything read them."""
    for entry, rule, _ in views:
        if entry.is_input and entry.loaded and rule in entry.views and entry.source_bytes is not None:
            entry.drop_pixels(partial(_redecode, entry.source_bytes, alpha))


def _redecode(data: bytes, alpha: str) -> Image.Image:
    return decode_image(data, max_bytes=len(data), max_pixels=1 << 62, alpha=alpha).pixels


def _parse_args(tool: Tool, arguments: dict[str, Any]) -> BaseModel | dict | ToolResult:
    if tool.raw_arguments:
        return _too_long(tool, arguments) or arguments
    # `null` for an optional argument means "not given": OpenAI's strict mode makes every optional field
    # required-but-nullable, so a strict model sends null for what it leaves out.
    fields = tool.Args.model_fields
    arguments = {k: v for k, v in arguments.items()
                 if not (v is None and k in fields and not fields[k].is_required())}
    try:
        return tool.Args.model_validate(arguments)
    except ValidationError as exc:
        return failure(tool.name, format_validation_error(tool.name, exc), "invalid_arguments")


def _too_long(tool: Tool, arguments: dict[str, Any]) -> ToolResult | None:
    """A tool that reads its arguments raw (a seed system's own checks) still gets its model's string-length
    limits checked here: strict schemas cannot carry them (`toolserver.schema`), and nothing else would."""
    try:
        tool.Args.model_validate(arguments)
    except ValidationError as exc:
        over = [err for err in exc.errors(include_url=False) if err["type"] == "string_too_long"]
        if over:
            where = ", ".join(".".join(str(p) for p in err["loc"]) for err in over)
            limit = over[0].get("ctx", {}).get("max_length")
            return failure(tool.name, f"Error: invalid arguments for {tool.name}: {where} is longer than {limit} "
                                      "characters.", "invalid_arguments")
    return None


def call_fingerprint(name: str, arguments: Any) -> str:
    """What an idempotency key is checked against: the tool and its arguments (as sent)."""
    body = arguments if isinstance(arguments, str) else _record_json(arguments)
    return hashlib.sha256(f"{name}\n{body}".encode()).hexdigest()


def outcome_json(result: ToolResult) -> dict[str, Any]:
    """A result as recorded for a replay: JSON, without inline image bytes (read back from the session then)."""
    recorded = result.model_dump(mode="json", exclude={"images": {"__all__": {"data"}}})
    recorded["inline"] = [image.data is not None for image in result.images]
    return recorded


def call_record(name: str, arguments: Any, result: ToolResult, started_at: float, seconds: float) -> str:
    """One line of the session's call log (JSON): what the inspector and trajectory export show."""
    record = {"tool": name, "arguments": arguments, "ok": result.ok,
              "error_code": result.error.code if result.error else None, "text": result.text[:MAX_RECORD_TEXT],
              "keys": [image.key for image in result.images], "meta": result.meta,
              "started_at": round(started_at, 6), "duration_ms": round(seconds * 1000, 3)}
    line = _record_json(record)
    if len(line) > MAX_RECORD_CHARS:
        record["arguments"] = {"truncated": _record_json(arguments)[:2000]}
        line = _record_json(record)
    return line


def _record_json(value: Any) -> str:
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. integers beyond 64 bits, which json.loads accepts
        return json.dumps(value, default=str, ensure_ascii=False)
