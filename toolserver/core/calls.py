"""Tool calls: one call at a time per session, read the way the session's profile reads arguments, run in the
work pool under a deadline, delivered, and written to the session's call log."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import orjson
from PIL import Image
from pydantic import BaseModel, ValidationError

from toolserver.arguments import read_arguments
from toolserver.core.delivery import Delivery
from toolserver.core.results import failure, format_validation_error
from toolserver.core.wiring import Services
from toolserver.errors import ToolFailure
from toolserver.imaging import decode_image
from toolserver.memorymap import ImageEntry, SessionMap
from toolserver.messages import tool_messages
from toolserver.models import OpenAIToolCall, ToolCallsResponse, ToolResult
from toolserver.profiles import get_profile
from toolserver.tools.base import Tool, ToolContext

MAX_RECORD_CHARS = 64_000  # one call record; longer arguments are kept as the start of their JSON
MAX_RECORD_TEXT = 20_000


class ToolCalls:
    def __init__(self, services: Services, delivery: Delivery):
        self.services = services
        self.settings = services.settings
        self.delivery = delivery

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any] | str | None,
                        *, base_url: str = "", binary: bool = False) -> ToolResult:
        """One call. `binary`: inline images come back as bytes, not base64 (for a msgpack answer)."""
        store, metrics = self.services.store, self.services.metrics
        async with store.exclusive(session_id) as session:
            started, started_at = time.perf_counter(), time.time()
            result = await self._call_locked(session, name, arguments, base_url, binary)
            await store.log_call(session, call_record(name, arguments, result, started_at,
                                                      time.perf_counter() - started))
            outcome = "ok" if result.ok else "error"
            metrics.tool_calls.labels(result.tool, outcome).inc()
            if result.error:
                metrics.tool_errors.labels(result.tool, result.error.code).inc()
            metrics.tool_latency.labels(result.tool).observe(time.perf_counter() - started)
            return result

    async def execute_tool_calls(self, session_id: str, tool_calls: Sequence[OpenAIToolCall],
                                 image_message: str = "tool", *, base_url: str = "") -> ToolCallsResponse:
        """Run OpenAI `tool_calls` in order; returns the messages to append and the raw results."""
        results = []
        for call in tool_calls:
            results.append(await self.call_tool(session_id, call.function.name, call.function.arguments,
                                                base_url=base_url))
        messages = tool_messages([c.id for c in tool_calls], results, image_message)
        return ToolCallsResponse(messages=messages, results=results)

    async def _call_locked(self, session: SessionMap, name: str, arguments: Any, base_url: str,
                           binary: bool = False) -> ToolResult:
        store, s = self.services.store, self.settings
        profile = get_profile(session.settings.profile)
        tool = profile.tool(name)
        if tool is None:
            return failure(name, profile.unknown_tool_text(name), "unknown_tool")
        limit = session.settings.max_tool_calls
        if limit is None:
            limit = profile.max_tool_calls
        if limit is not None and session.tool_calls >= limit:
            return failure(name, profile.limit_message.format(limit=limit), "call_limit")
        await store.count_call(session)
        try:  # the way the profile's system reads arguments, at every entry point
            arguments = read_arguments(profile.arguments, name, arguments, tool.validation_schema)
        except ToolFailure as exc:
            return failure(name, exc.text, exc.code)
        args = _parse_args(tool, arguments)
        if isinstance(args, ToolResult):
            return args
        ctx = ToolContext.of(session, sr=self.services.sr, documents=self.services.documents,
                             sr_max_output_pixels=s.sr_max_output_pixels,
                             deadline=time.monotonic() + s.tool_timeout_s, cached_view=store.view_lookup(session))
        output_settings = session.settings.output
        try:
            output, delivered, stored = await self.services.pool.run(
                self.delivery.run_and_encode, tool, ctx, args, output_settings.format, output_settings.delivery,
                store.stores_encoded, binary, timeout=s.tool_timeout_s, lane=tool.lane,
            )
        except TimeoutError:
            return failure(name, f"Error: {name} did not finish within {s.tool_timeout_s:g} s.", "timeout")
        if ctx.new_views:
            await store.keep_views(session, ctx.new_views)
            if not profile.reads_originals and not store.stores_encoded:
                drop_originals(ctx.new_views, str(profile.alpha))
        if not await store.is_live(session):
            return failure(name, "Error: the session ended while the tool ran.", "session_gone")
        return await self.delivery.register_output(session, name, output, delivered, stored, base_url)


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
        return arguments
    # `null` for an optional argument means "not given": OpenAI's strict mode makes every optional field
    # required-but-nullable, so a strict model sends null for what it leaves out.
    fields = tool.Args.model_fields
    arguments = {k: v for k, v in arguments.items()
                 if not (v is None and k in fields and not fields[k].is_required())}
    try:
        return tool.Args.model_validate(arguments)
    except ValidationError as exc:
        return failure(tool.name, format_validation_error(tool.name, exc), "invalid_arguments")


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
