"""`/act`: a model's raw turn in, the observation out. The session's call format (or the one named) finds the
calls, its turn rule says which run and when the turn stops, and it renders what the system feeds back."""

from __future__ import annotations

from typing import Any

from toolserver.core.calls import IdempotencyKey, ToolCalls, check_renderable
from toolserver.core.results import failure
from toolserver.formats import get_format
from toolserver.formats.base import IMAGE_MARKERS, NO_TOOL_CALL, CallFormat, Parsed, ParsedCall
from toolserver.models import ActResponse, ResultImage, ToolResult
from toolserver.profiles import get_profile


async def act(calls: ToolCalls, session_id: str, text: str, fmt: str = "auto", *, base_url: str = "",
              idempotency_key: str | None = None) -> ActResponse:
    """Find the tool calls in raw model output, run them, and render the observation. With `idempotency_key`,
    the turn's i-th call is keyed `act:<key>#<i>`: a retried turn runs none of its calls twice."""
    session = await calls.services.store.get(session_id)
    check_renderable(session)
    call_format = get_profile(session.settings.profile).format if fmt == "auto" else get_format(fmt)
    parsed = call_format.read(text)
    turn = call_format.turn
    records: list[dict[str, Any]] = []
    results: list[ToolResult] = []
    if not turn.errors_last:
        _add_parser_results(parsed, records, results)
    for i, call in enumerate(parsed.calls):
        records.append({"name": call.name, "arguments": call.arguments, "error": None})
        key = IdempotencyKey(f"act:{idempotency_key}#{i}") if idempotency_key else None
        results.append(await calls.call_tool(session_id, call.name, call.arguments, base_url=base_url,
                                             idempotency_key=key))
        if turn.stop_at_failure and not results[-1].ok:
            break
    if turn.errors_last and all(r.ok for r in results):  # a broken call is reached after those before it
        _add_parser_results(parsed, records, results)
    return _turn(call_format, session.settings.image_marker, parsed, records, results)


async def call_as_turn(calls: ToolCalls, session_id: str, name: str, arguments: dict[str, Any] | str, *,
                       base_url: str = "") -> ActResponse:
    """One structured call as a turn of the session's profile: run as `/v1/sessions/{id}/tools/{name}` runs it, then
    reported, rendered and ended by the profile's call format as `/act` does for a turn that holds this one call."""
    session = await calls.services.store.get(session_id)
    check_renderable(session)
    call_format = get_profile(session.settings.profile).format
    result = await calls.call_tool(session_id, name, arguments, base_url=base_url)
    parsed = Parsed(call_format.name, calls=[ParsedCall(name, arguments)])
    return _turn(call_format, session.settings.image_marker, parsed,
                 [{"name": name, "arguments": arguments, "error": None}], [result])


def _turn(call_format: CallFormat, image_marker: str, parsed: Parsed, records: list[dict[str, Any]],
          results: list[ToolResult]) -> ActResponse:
    """A turn's results finished, ended, rendered and reported by its call format."""
    results = call_format.finish(results)
    return ActResponse(format=call_format.name, calls=records, results=results, done=call_format.ends(parsed, results),
                       observation=call_format.observation(results),
                       prompt=call_format.prompt(results, image=IMAGE_MARKERS[image_marker]))


def _add_parser_results(parsed: Parsed, records: list[dict[str, Any]], results: list[ToolResult]) -> None:
    for notice in parsed.notices:
        records.append({"name": None, "arguments": None, "error": notice})
        results.append(failure("parser", notice, NO_TOOL_CALL))
    for error in parsed.errors:
        records.append({"name": None, "arguments": None, "error": error})
        results.append(failure("parser", error, "parse_error"))


def carry_images_once(response: ActResponse) -> ActResponse:
    """The answer with each image's bytes once: a result image whose data URL the observation already carries
    keeps its key, size and mime but not its `data` (a 1 MP PNG is 1.5 MB of base64; twice is 3 MB per call)."""
    shown = [part["image_url"]["url"] for message in response.observation
             if isinstance(message.get("content"), list)
             for part in message["content"] if part.get("type") == "image_url"]
    if not shown:
        return response
    results = []
    for result in response.results:
        images = [img.model_copy(update={"data": None}) if _shown_as_data_url(img, shown) else img
                  for img in result.images]
        results.append(result.model_copy(update={"images": images}))
    return response.model_copy(update={"results": results})


def _shown_as_data_url(image: ResultImage, urls: list[str]) -> bool:
    # Compared in place: building the image's data URL again would copy its megabytes for each look.
    if not isinstance(image.data, str):
        return False
    prefix = f"data:{image.mime};base64,"
    size = len(prefix) + len(image.data)
    return any(len(url) == size and url.startswith(prefix) and url.endswith(image.data) for url in urls)
