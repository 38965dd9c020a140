"""The core every adapter (HTTP, MCP, client tests) calls: sessions, image intake, tool execution.

No HTTP here. Errors that are the caller's protocol problem are raised as `ToolServerError`
subclasses; tool-level failures come back as `ToolResult(ok=False)` with model-readable text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pybase64
from PIL import Image
from pydantic import BaseModel, ValidationError

from toolserver.arguments import read_arguments
from toolserver.config import Settings
from toolserver.documents.encoders import Encoder
from toolserver.documents.library import ArmMount, DocumentLibrary
from toolserver.documents.sources import DocumentError, check_filename, filename_from_path
from toolserver.errors import BadRequest, Conflict, NotFound, TooLarge, ToolFailure, ToolServerError
from toolserver.imaging import OUTPUT_FORMATS, DecodedImage, decode_image, encode_image, encode_png
from toolserver.messages import TURNS, TurnRule, observation_messages, observation_prompt, tool_messages
from toolserver.metrics import Metrics
from toolserver.models import (
    ActResponse,
    AddedImages,
    CallRecord,
    CreateSessionRequest,
    DocumentInfo,
    ErrorInfo,
    ImageInfo,
    ImageInput,
    OpenAIToolCall,
    ResultImage,
    SessionCreated,
    SessionInfo,
    SessionList,
    SessionSettings,
    SessionSummaryInfo,
    TextInfo,
    ToolCallsResponse,
    ToolResult,
    Trajectory,
    TrajectoryImage,
    ValidateItem,
    ValidateResponse,
    VideoInfo,
)
from toolserver.parsers import parse
from toolserver.pool import WorkPool
from toolserver.profiles import Profile, get_profile
from toolserver.session import (
    ImageEntry,
    MemoryStore,
    Session,
    SessionStore,
    compute_view,
    observation_number,
    plan_texts,
)
from toolserver.sources import input_bytes, resolve_allowed_path
from toolserver.sr.engine import SREngine
from toolserver.tools.base import Tool, ToolContext, ToolOutput
from toolserver.validation.batch import validate_items
from toolserver.video import DecodedVideo, VideoLimits, decode_video, looks_like_video

log = logging.getLogger("toolserver")
NO_TOOL_CALL = "no_tool_call"  # error code of an environment's reply to a text without a call


@dataclass(frozen=True)
class RawImage:
    """Bytes that arrived as they are (multipart upload), with an optional key and, for a video, its sampling."""

    data: bytes
    key: str | None = None
    frames_per_second: float | None = None
    max_frames: int | None = None


@dataclass
class _Intake:
    """Decoded inputs in order (a video's frames in its place), and where each video's frames are."""

    images: list[tuple[DecodedImage, str | None]]
    videos: list[tuple[DecodedVideo, int]]  # the video and the position of its first frame in `images`

    def video_infos(self, infos: list[ImageInfo]) -> list[VideoInfo]:
        out = []
        for video, start in self.videos:
            keys = [info.key for info in infos[start:start + len(video.frames)]]
            out.append(VideoInfo(keys=keys, timestamps_s=video.timestamps, duration_s=round(video.duration_s, 6),
                                 source_fps=video.source_fps, width=video.width, height=video.height,
                                 container=video.container, codec=video.codec))
        return out


@dataclass(frozen=True)
class _Delivered:
    mime: str
    data: str | None = None  # base64 of the encoded image, for inline delivery (encoded off the event loop)
    path: str | None = None


def format_validation_error(tool: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return f"Error: invalid arguments for {tool}: " + "; ".join(parts) + "."


class Core:
    def __init__(self, settings: Settings | None = None):
        self.settings = settings or Settings()
        s = self.settings
        self.store = build_store(s)
        self.pool = WorkPool(s.workers, s.queue_limit, s.retry_after_s, heavy_workers=s.heavy_workers,
                             heavy_nice=s.heavy_nice)
        self.sr = SREngine(s.sr_model_dir, device=s.sr_device, tile=s.sr_tile, tile_pad=s.sr_tile_pad,
                           max_batch=s.sr_max_batch, channels_last=s.sr_channels_last, half=s.sr_half,
                           prefer_plus=s.sr_prefer_plus, verify_sha256=s.sr_verify_sha256, cpu_workers=s.sr_cpu_workers,
                           threads=s.sr_threads, nice=s.heavy_nice)
        self.documents = build_library(s)
        self.metrics = Metrics()
        if isinstance(self.store, MemoryStore):
            store = self.store
            self.metrics.gauge("toolserver_sessions_live", "Live sessions", lambda: len(store))
            self.metrics.gauge("toolserver_bytes_held", "Bytes held by all sessions", lambda: store.total_bytes)
            self.metrics.gauge("toolserver_sessions_evicted", "Sessions evicted (LRU)", lambda: store.evicted)
            self.metrics.gauge("toolserver_sessions_expired", "Sessions expired (TTL)", lambda: store.expired)
        else:
            cache = self.store.cache
            self.metrics.gauge("toolserver_decoded_cache_bytes", "Decoded images cached by this replica",
                               lambda: cache.nbytes)
        self.metrics.gauge("toolserver_pool_in_flight", "Jobs admitted to the work pool", lambda: self.pool.in_flight)
        for name, lane in self.pool.lanes.items():
            self.metrics.gauge(f"toolserver_pool_{name}_in_flight", f"Jobs admitted to the {name} lane",
                               lambda lane=lane: lane.in_flight)
        self.started = time.time()
        self._sweeper: asyncio.Task | None = None

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever())
        if self.settings.doc_warm_up and self.documents.embedding_roles() and self.documents.has_documents():
            # Loading sentence-transformers takes seconds: do it before the first query needs it.
            threading.Thread(target=self.documents.warm_up, name="toolserver-doc-warmup", daemon=True).start()

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        self.pool.shutdown()
        self.sr.close()
        self.documents.close()
        await self.store.close()

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sweep_interval_s)
            self.store.sweep()

    # -- sessions -----------------------------------------------------------------------------
    def _profile(self, session: Session) -> Profile:
        return get_profile(session.settings.profile)

    async def create_session(self, request: CreateSessionRequest | None = None,
                             raw_images: Sequence[RawImage] = ()) -> SessionCreated:
        request = request or CreateSessionRequest()
        profile = get_profile(request.profile)
        settings = SessionSettings(**request.model_dump(exclude={"images", "texts"}))
        settings.coords = settings.coords or profile.coords
        settings.view = settings.view or profile.view
        ttl = min(settings.ttl_s or self.settings.default_ttl_s, self.settings.max_ttl_s)
        # Decoded before the session exists: all or nothing.
        intake = await self._decode_all(request.images, raw_images, profile.alpha)
        session = await self.store.create(settings, ttl)
        try:
            infos = await self._register_inputs(session, intake.images)
            texts = await self._add_texts(session, request.texts)
        except BaseException:
            with contextlib.suppress(ToolServerError):
                await self.store.release(session.id)
            raise
        self.metrics.sessions_created.inc()
        return SessionCreated(session_id=session.id, profile=profile.name, images=infos, texts=texts,
                              expires_in_s=ttl, videos=intake.video_infos(infos))

    async def session_info(self, session_id: str) -> SessionInfo:
        session = await self.store.get(session_id)
        return SessionInfo(
            session_id=session.id, settings=session.settings, images=[e.info() for e in session.images],
            texts=[TextInfo(key=k, length=n) for k, n in session.text_lengths.items()],
            tool_calls=session.tool_calls, bytes_held=session.nbytes, expires_in_s=session.expires_in(),
        )

    async def release(self, session_id: str) -> None:
        await self.store.release(session_id)

    # -- inspection: what the model saw ---------------------------------------------------------
    async def trajectory(self, session_id: str) -> Trajectory:
        """The session's images and its call log, oldest call first."""
        session = await self.store.get(session_id)
        records, dropped = await self.store.call_log(session)
        calls = [CallRecord(seq=dropped + i + 1, **json.loads(line)) for i, line in enumerate(records)]
        images = [TrajectoryImage(key=e.key, index=e.index, width=e.size[0], height=e.size[1], origin=e.origin)
                  for e in session.images]
        return Trajectory(session_id=session.id, profile=session.settings.profile, images=images, calls=calls,
                          dropped_calls=dropped)

    async def list_sessions(self, offset: int = 0, limit: int = 50) -> SessionList:
        rows, total = await self.store.list_sessions(offset, limit)
        return SessionList(sessions=[SessionSummaryInfo(**vars(row)) for row in rows], total=total, offset=offset,
                           limit=limit)

    async def thumbnail(self, session_id: str, key: str, max_side: int) -> bytes:
        """A JPEG no larger than `max_side` on its long side (a page showing fifty images stays light)."""
        session = await self.store.get(session_id)
        entry = _image_by_ref(session, key)
        return await self.pool.run(_thumbnail, entry, max_side, self.settings.jpeg_quality)

    async def add_images(self, session_id: str, images: Sequence[ImageInput] = (),
                         raw_images: Sequence[RawImage] = ()) -> AddedImages:
        session = await self.store.get(session_id)
        intake = await self._decode_all(images, raw_images, self._profile(session).alpha)
        async with self.store.mutating(session_id) as session:  # may have expired while decoding
            infos = await self._register_inputs(session, intake.images)
        return AddedImages(images=infos, videos=intake.video_infos(infos))

    async def add_texts(self, session_id: str, texts: dict[str, str] | list[str]) -> list[str]:
        async with self.store.mutating(session_id) as session:
            return await self._add_texts(session, texts)

    # -- intake -------------------------------------------------------------------------------
    async def _decode_all(self, images: Sequence[ImageInput], raw_images: Sequence[RawImage],
                          alpha: str = "white") -> _Intake:
        """Every input decoded before anything is registered (all or nothing); videos become their frames."""
        s = self.settings
        items = list(raw_images)
        for item in images:
            items.append(RawImage(await input_bytes(item, s), item.key, item.frames_per_second, item.max_frames))
        if len(items) > s.max_images_per_session:
            raise TooLarge(f"at most {s.max_images_per_session} images per session")
        intake = _Intake([], [])
        for item in items:
            if looks_like_video(item.data):
                video, frames = await self.pool.run(self._decode_video, item, lane="heavy")
                intake.videos.append((video, len(intake.images)))
                for n, frame in enumerate(frames, start=1):
                    intake.images.append((frame, f"{item.key}_frame_{n}" if item.key else None))
                if len(intake.images) > s.max_images_per_session:
                    raise TooLarge(f"at most {s.max_images_per_session} images per session (a video's frames "
                                   "count as images)")
                continue
            decoded = await self.pool.run(_decode, item.data, s.max_image_bytes, s.max_image_pixels, alpha)
            intake.images.append((decoded, item.key))
        return intake

    def _decode_video(self, item: RawImage) -> tuple[DecodedVideo, list[DecodedImage]]:
        """The sampled frames, as decoded images whose source is a PNG (or nothing: see below)."""
        s = self.settings
        if len(item.data) > s.max_image_bytes:
            raise TooLarge(f"the video is {len(item.data)} bytes, over the {s.max_image_bytes}-byte upload limit")
        limits = VideoLimits(max_seconds=s.max_video_seconds, max_frames=s.max_video_frames,
                             max_pixels=s.max_image_pixels, max_decoded_bytes=s.session_max_bytes)
        video = decode_video(item.data, limits, fps=item.frames_per_second, max_frames=item.max_frames)
        # A store that keeps bytes (Redis) stores each frame as a lossless PNG; the in-memory store keeps the
        # pixels alone (a GET encodes them like a tool image's), which halves the intake's time.
        frames = [DecodedImage(pixels=frame, source_format="PNG",
                               source_bytes=encode_png(frame, encoder=s.png_encoder) if self.store.stores_encoded
                               else None) for frame in video.frames]
        return video, frames

    async def _register_inputs(self, session: Session,
                               decoded: list[tuple[DecodedImage, str | None]]) -> list[ImageInfo]:
        if len(session.images) + len(decoded) > self.settings.max_images_per_session:
            raise TooLarge(f"at most {self.settings.max_images_per_session} images per session")
        keys: list[str] = []
        taken = set(session.by_key)
        for _, key in decoded:
            if key is None:
                key = session.next_input_key(taken)
            elif key in taken:
                raise BadRequest(f"image key {key!r} already exists in this session", code="duplicate_key")
            taken.add(key)
            keys.append(key)
        entries = []
        for (image, _), key in zip(decoded, keys, strict=True):
            view, view_error = compute_view(session.view_rule, image.pixels.size)
            entries.append(ImageEntry(key=key, index=-1, origin="input", pixels=image.pixels, view_size=view,
                                      view_error=view_error, source_bytes=image.source_bytes,
                                      source_mime=image.mime if image.source_bytes is not None else None))
        # A trainer keeping ARM-Thinker's imgs_map may upload `observation_N` itself: the counter continues
        # after the highest N present, so the next tool image is observation_{N+1} (never a duplicate key).
        highest = max((observation_number(key) or 0 for key in keys), default=0)
        await self.store.add_images(session, entries, [image.source_bytes for image, _ in decoded],
                                    observations=max(0, highest - session.observations))
        return [e.info() for e in entries]

    async def _add_texts(self, session: Session, texts: dict[str, str] | list[str]) -> list[str]:
        s = self.settings
        items: list[tuple[str | None, str]] = (list(texts.items()) if isinstance(texts, dict)
                                               else [(None, t) for t in texts])
        named = plan_texts(session, items, max_texts=s.max_texts_per_session, max_chars=s.max_text_chars)
        if named:
            await self.store.add_texts(session, named)
        return [key for key, _ in named]

    async def image_bytes(self, session_id: str, key: str, fmt: str | None = None) -> tuple[bytes, str]:
        """An image's bytes: inputs as uploaded, tool images in the session's output format."""
        session = await self.store.get(session_id)
        entry = _image_by_ref(session, key)
        if fmt is None and entry.is_input and entry.source_mime is not None:  # a video frame may have no source
            return await self.store.read_source(session, entry), entry.source_mime
        fmt = fmt or session.settings.output.format
        if fmt not in OUTPUT_FORMATS:
            raise BadRequest(f"format must be one of {list(OUTPUT_FORMATS)}")
        data = await self.store.cached_encoding(session, entry, fmt)
        if data is None:
            data = await self.pool.run(self._encode, entry, fmt)
            await self.store.keep_encoding(session, entry, fmt, data)
        return data, OUTPUT_FORMATS[fmt]

    def _encode(self, img: Image.Image | ImageEntry, fmt: str) -> bytes:
        """Encode for output (in a worker thread: an entry's pixels may first have to be loaded)."""
        s = self.settings
        if isinstance(img, ImageEntry):
            img = img.pixels
        return encode_image(img, fmt, png_level=s.png_compress_level, jpeg_quality=s.jpeg_quality,
                            webp_quality=s.webp_quality, png_encoder=s.png_encoder)

    # -- tools --------------------------------------------------------------------------------
    def list_tools(self, profile: str = "default", *, strict: bool = False, coords=None) -> list[dict[str, Any]]:
        return get_profile(profile).openai_tools(strict=strict, coords=coords, subs=self.capability_phrases())

    def capability_phrases(self) -> dict[str, str]:
        """What the tool descriptions say about this server's installed models."""
        phrases = {"{doc_rankings}": self.documents.describe_rankings()}
        if self.sr.available:
            scales = ", ".join(str(s) for s in self.sr.scales)
            return {**phrases, "{sr_scales}": f"Available scales on this server: {scales}.",
                    "{sr_scales_fallback}": f"Available scales on this server: {scales}."}
        return {**phrases, "{sr_scales}": "Super-resolution weights are not installed on this server, so calls fail.",
                "{sr_scales_fallback}": "Super-resolution weights are not installed on this server: regions are "
                                        "enlarged with bicubic resizing instead."}

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any] | str | None,
                        *, base_url: str = "") -> ToolResult:
        async with self.store.exclusive(session_id) as session:
            started, started_at = time.perf_counter(), time.time()
            result = await self._call_locked(session, name, arguments, base_url)
            await self.store.log_call(session, call_record(name, arguments, result, started_at,
                                                           time.perf_counter() - started))
            outcome = "ok" if result.ok else "error"
            self.metrics.tool_calls.labels(result.tool, outcome).inc()
            if result.error:
                self.metrics.tool_errors.labels(result.tool, result.error.code).inc()
            self.metrics.tool_latency.labels(result.tool).observe(time.perf_counter() - started)
            return result

    async def _call_locked(self, session: Session, name: str, arguments: Any, base_url: str) -> ToolResult:
        profile = self._profile(session)
        tool = profile.tool(name)
        if tool is None:
            return _failure(name, profile.unknown_tool_text(name), "unknown_tool")
        limit = session.settings.max_tool_calls
        if limit is None:
            limit = profile.max_tool_calls
        if limit is not None and session.tool_calls >= limit:
            return _failure(name, profile.limit_message.format(limit=limit), "call_limit")
        await self.store.count_call(session)
        try:  # the way the profile's system reads arguments, at every entry point
            arguments = read_arguments(profile.arguments, name, arguments, tool.validation_schema)
        except ToolFailure as failure:
            return _failure(name, failure.text, failure.code)
        args = _parse_args(tool, arguments)
        if isinstance(args, ToolResult):
            return args
        ctx = ToolContext.of(session, sr=self.sr, documents=self.documents,
                             sr_max_output_pixels=self.settings.sr_max_output_pixels,
                             deadline=time.monotonic() + self.settings.tool_timeout_s,
                             cached_view=self.store.view_lookup(session))
        output_settings = session.settings.output
        try:
            output, delivered, stored = await self.pool.run(
                self._run_and_encode, tool, ctx, args, output_settings.format, output_settings.delivery,
                self.store.stores_encoded, timeout=self.settings.tool_timeout_s, lane=tool.lane,
            )
        except TimeoutError:
            return _failure(name, f"Error: {name} did not finish within {self.settings.tool_timeout_s:g} s.",
                            "timeout")
        if ctx.new_views:
            await self.store.keep_views(session, ctx.new_views)
        if not await self.store.is_live(session):
            return _failure(name, "Error: the session ended while the tool ran.", "session_gone")
        return await self._register_output(session, name, output, delivered, stored, base_url)

    def _run_and_encode(self, tool: Tool, ctx: ToolContext, args: Any, fmt: str, delivery: str,
                        store_png: bool) -> tuple[ToolOutput, list[_Delivered], list[bytes | None]]:
        """Runs in a worker thread: the tool itself, then the encodings its delivery (and the store) need."""
        try:
            output = tool.run(ctx, args)
        except ToolFailure as failure:
            return ToolOutput.failure(failure.text, failure.code), [], []
        delivered = []
        stored: list[bytes | None] = []
        for offset, (img, entry) in enumerate(output.returned()):
            data = None
            if delivery != "ref":
                if entry is not None and entry.is_input and entry.source_mime is not None and delivery == "inline":
                    # An input returned again: its uploaded bytes are exact and cost no encoding.
                    data, mime = entry.source_bytes or b"", entry.source_mime or "application/octet-stream"
                else:
                    data, mime = self._encode(img, fmt), OUTPUT_FORMATS[fmt]
                if delivery == "inline":
                    delivered.append(_Delivered(mime=mime, data=pybase64.b64encode_as_string(data)))
                else:
                    path = self._write_output(ctx.session_id, ctx.observation_key(offset), fmt, data)
                    delivered.append(_Delivered(mime=mime, path=str(path)))
            if store_png and entry is None:  # new pixels, kept losslessly (reused images are stored already)
                stored.append(data if data is not None and fmt == "png" else self._encode(img, "png"))
            else:
                stored.append(None)
        return output, delivered, stored

    def _write_output(self, session_id: str, key: str, fmt: str, data: bytes) -> Path:
        directory = self.settings.resolved_output_dir().resolve() / session_id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{key}.{'jpg' if fmt == 'jpeg' else fmt}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path

    async def _register_output(self, session: Session, name: str, output: ToolOutput,
                               delivered: list[_Delivered], stored: list[bytes | None], base_url: str) -> ToolResult:
        new_entries = []
        for offset, (img, source) in enumerate(output.returned()):
            view, view_error = compute_view(session.view_rule, img.size)
            new_entries.append(ImageEntry(
                key=session.observation_key(offset), index=-1, origin=f"tool:{name}", pixels=img,
                view_size=view, view_error=view_error, alias_of=source.key if source is not None else None,
            ))
        try:
            await self.store.add_images(session, new_entries, stored, observations=len(new_entries))
        except TooLarge as exc:
            return _failure(name, f"Error: {exc.message}", "session_full")
        images = []
        fmt = session.settings.output.format
        for i, entry in enumerate(new_entries):
            out = ResultImage(key=entry.key, index=entry.index, width=entry.size[0], height=entry.size[1],
                              mime=OUTPUT_FORMATS[fmt])
            if i < len(delivered):
                out.mime = delivered[i].mime
                out.data = delivered[i].data
                out.path = delivered[i].path
            if session.settings.output.delivery == "ref":
                out.url = f"{base_url}/v1/sessions/{session.id}/images/{entry.key}"
            images.append(out)
        error = None if output.ok else ErrorInfo(code=output.error_code or "tool_error", message=output.text)
        return ToolResult(ok=output.ok, tool=name, text=output.text, images=images, error=error, meta=output.meta)

    async def validate(self, items: Sequence[ValidateItem]) -> ValidateResponse:
        """Batch validation without a session (rewards): results in order, one error per bad item."""
        if len(items) > self.settings.max_validate_items:
            raise TooLarge(f"at most {self.settings.max_validate_items} items per validation request")
        results = await self.pool.run(validate_items, items, self.settings.max_text_chars,
                                      timeout=self.settings.tool_timeout_s)
        self.metrics.validations.inc(len(items))
        return ValidateResponse(results=results)

    # -- documents (global, not per session) -------------------------------------------------------
    async def ingest_document(self, *, data: bytes | None = None, upload_name: str = "document.pdf",
                              path: str | None = None, filename: str | None = None,
                              wait: bool = False) -> DocumentInfo:
        """Check the document now and ingest it in the background (or wait for the end with `wait`)."""
        library = self.documents
        with _document_errors():
            if data is not None:
                if len(data) > self.settings.doc_max_upload_bytes:
                    raise TooLarge(f"a document upload is limited to {self.settings.doc_max_upload_bytes} bytes")
                filename = check_filename(filename) if filename else filename_from_upload(upload_name)
                source = await asyncio.to_thread(library.save_upload, data, f"{filename}.pdf")
                remove_after = True
            else:
                source = resolve_allowed_path(path or "", self.settings.allowed_roots)
                remove_after = False
            info, future = await asyncio.to_thread(library.submit, source, filename, remove_after=remove_after)
            if not wait:
                return info
            return await asyncio.wrap_future(future)

    def list_documents(self) -> list[DocumentInfo]:
        return self.documents.list()

    async def document(self, filename: str) -> DocumentInfo:
        with _document_errors():
            return await asyncio.to_thread(self.documents.get, filename)

    async def delete_document(self, filename: str) -> None:
        with _document_errors():
            await asyncio.to_thread(self.documents.delete, filename)

    async def execute_tool_calls(self, session_id: str, tool_calls: Sequence[OpenAIToolCall],
                                 image_message: str = "tool", *, base_url: str = "") -> ToolCallsResponse:
        """Run OpenAI `tool_calls` in order; returns the messages to append and the raw results."""
        results = []
        for call in tool_calls:
            results.append(await self.call_tool(session_id, call.function.name, call.function.arguments,
                                                base_url=base_url))
        messages = tool_messages([c.id for c in tool_calls], results, image_message)
        return ToolCallsResponse(messages=messages, results=results)

    async def act(self, session_id: str, text: str, fmt: str = "auto", *, base_url: str = "") -> ActResponse:
        """Find the tool calls in raw model output, run them, and render the observation."""
        session = await self.store.get(session_id)
        fmt = self._profile(session).call_format if fmt == "auto" else fmt
        parsed = parse(text, fmt)
        turn = TURNS.get(fmt, TurnRule())
        calls: list[dict[str, Any]] = []
        results: list[ToolResult] = []

        def add_parser_results() -> None:
            for notice in parsed.notices:
                calls.append({"name": None, "arguments": None, "error": notice})
                results.append(_failure("parser", notice, NO_TOOL_CALL))
            for error in parsed.errors:
                calls.append({"name": None, "arguments": None, "error": error})
                results.append(_failure("parser", error, "parse_error"))

        if not turn.errors_last:
            add_parser_results()
        for call in parsed.calls:
            calls.append({"name": call.name, "arguments": call.arguments, "error": None})
            results.append(await self.call_tool(session_id, call.name, call.arguments, base_url=base_url))
            if turn.stop_at_failure and not results[-1].ok:
                break
        if turn.errors_last and all(r.ok for r in results):  # a broken call is reached after those before it
            add_parser_results()
        if fmt == "groundlight":
            results = [_groundlight_wrap(r) for r in results]
        done = parsed.done if parsed.done is not None else not (parsed.calls or parsed.errors or parsed.notices)
        return ActResponse(format=fmt, calls=calls, results=results, done=done,
                           observation=observation_messages(fmt, results), prompt=observation_prompt(fmt, results))


@contextlib.contextmanager
def _document_errors():
    """Library errors as protocol errors: the HTTP status says what kind of problem it is."""
    try:
        yield
    except DocumentError as exc:
        kind: type[ToolServerError] = {"unknown_document": NotFound, "not_found": NotFound,
                                       "ingest_in_progress": Conflict, "too_many_pages": TooLarge}.get(exc.code,
                                                                                                     BadRequest)
        raise kind(exc.message, code=exc.code) from None


def filename_from_upload(name: str) -> str:
    try:
        return filename_from_path(Path(Path(name).name or "document.pdf"))
    except DocumentError:
        return "document"


def build_store(s: Settings) -> SessionStore:
    if s.session_store == "redis":
        from toolserver.redis_store import RedisStore

        # The lock outlives the longest tool call, so an expiry means a stuck holder, not a slow one.
        return RedisStore(s.redis_url, session_max_bytes=s.session_max_bytes, decoded_cache_bytes=s.decoded_cache_bytes,
                          lock_timeout_s=s.tool_timeout_s + 30, timeout_s=s.redis_timeout_s, prefix=s.redis_prefix,
                          retry_after_s=s.retry_after_s)
    return MemoryStore(session_max_bytes=s.session_max_bytes, total_max_bytes=s.total_max_bytes)


def build_library(s: Settings) -> DocumentLibrary:
    clip = Encoder("clip", s.clip_model, s.doc_device)
    text = Encoder("text", s.text_model, s.doc_device, batch_size=64)
    arm = None
    if s.arm_index_path is not None:
        arm = ArmMount(s.arm_index_path, s.arm_collection, s.arm_image_root or s.arm_index_path, clip)
    return DocumentLibrary(s.resolved_documents_dir(), clip=clip, text=text, chroma_url=s.chroma_url,
                           page_long_side=s.doc_page_long_side, page_format=s.doc_page_format,
                           jpeg_quality=s.jpeg_quality, batch_pages=s.doc_batch_pages, max_pages=s.doc_max_pages,
                           vector_cache_bytes=s.doc_vector_cache_bytes,
                           arm=arm)


def _groundlight_wrap(result: ToolResult) -> ToolResult:
    """Groundlight's environment names unknown tools and wraps other failures in its own words."""
    if result.ok or result.tool == "parser" or result.text.startswith("Error: Parsing arguments"):
        return result
    if result.error and result.error.code == "unknown_tool":
        text = f"Error: Unknown tool '{result.tool}' specified. Valid tools are: zoom"
    else:
        text = f"Error: During execution of tool '{result.tool}': {result.text}"
    return result.model_copy(update={"text": text, "error": ErrorInfo(code=result.error.code, message=text)})


def _image_by_ref(session: Session, key: str) -> ImageEntry:
    """An image named in a URL: its key, or its index written as digits; 404 otherwise."""
    entry = session.resolve(int(key) if key.isdigit() else key)
    if entry is None:
        raise NotFound(f"no image {key!r} in this session; images: {session.keys}", code="unknown_image")
    return entry


def _thumbnail(entry: ImageEntry, max_side: int, quality: int) -> bytes:
    image = entry.pixels
    width, height = image.size
    if max(width, height) > max_side:  # the aspect ratio kept, at least 1 px a side
        scale = max_side / max(width, height)
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        image = image.resize(size, Image.Resampling.BICUBIC, reducing_gap=3.0)
    return encode_image(image, "jpeg", jpeg_quality=quality)


def _decode(data: bytes, max_bytes: int, max_pixels: int, alpha: str) -> DecodedImage:
    return decode_image(data, max_bytes=max_bytes, max_pixels=max_pixels, alpha=alpha)


MAX_RECORD_CHARS = 64_000  # one call record; longer arguments are kept as the start of their JSON
MAX_RECORD_TEXT = 20_000


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


def _failure(tool: str, text: str, code: str, meta: dict | None = None) -> ToolResult:
    return ToolResult(ok=False, tool=tool, text=text, error=ErrorInfo(code=code, message=text), meta=meta or {})


def _parse_args(tool: Tool, arguments: dict[str, Any]) -> BaseModel | dict | ToolResult:
    if tool.raw_arguments:
        return arguments
    try:
        return tool.Args.model_validate(arguments)
    except ValidationError as exc:
        return _failure(tool.name, format_validation_error(tool.name, exc), "invalid_arguments")
