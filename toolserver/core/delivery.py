"""Delivery: a tool's images encoded as the session asks (inline base64, a `ref` URL, a file `path`), registered
as the session's next observations, and read back later (bytes, thumbnails).

`run_and_encode` runs in a worker thread, so encoding never blocks the event loop; registration happens on the
loop afterwards (the store commits a call's images with the rest of its effect), so a call that timed out or
whose session ended changes nothing. A call replayed for its idempotency key gets the same bytes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shutil
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pybase64
from PIL import Image

from toolserver.core.shm import ShmFiles
from toolserver.core.wiring import Services
from toolserver.encodepool import EncodePool, default_processes
from toolserver.errors import BadRequest, InsufficientStorage, NotFound, ToolFailure
from toolserver.imaging import OUTPUT_FORMATS, encode_image, fpng_available
from toolserver.lazyimage import unread
from toolserver.memorymap import (
    Blob,
    Derivation,
    DerivedPixels,
    HeldPixels,
    ImageEntry,
    RecordedOutcome,
    SessionMap,
    compute_view,
)
from toolserver.models import ErrorInfo, ResultImage, ShmHandle, ToolResult
from toolserver.tools.base import Tool, ToolContext, ToolOutput

_SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{32}$")  # secrets.token_urlsafe(24), the stores' session ids
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}
_FORMAT_OF = {mime: fmt for fmt, mime in OUTPUT_FORMATS.items()}


@dataclass(frozen=True)
class Delivered:
    mime: str
    data: str | bytes | None = None  # inline delivery: base64 (encoded off the event loop), or the bytes (binary)
    path: str | None = None
    shm: ShmHandle | None = None


class Delivery:
    def __init__(self, services: Services):
        self.services = services
        self.settings = services.settings
        # Bytes of delivered files in the output directory (session folders only): measured at the first write
        # and at each sweep, counted in between. Another replica sharing the directory is seen at the sweep.
        self._output_bytes: int | None = None
        self._output_lock = threading.Lock()
        s = self.settings
        self.shm = ShmFiles(s.shm_dir, s.shm_max_bytes, s.shm_ttl_s, enabled=s.shm_delivery)
        processes = s.encode_processes if s.encode_processes is not None else default_processes()
        self.encoders = EncodePool(processes if fpng_available() and s.png_encoder != "pillow" else 0)
        self._stage = services.metrics.delivery_seconds

    async def close(self) -> None:
        """At server stop: the encode processes, and the `shm` files of a store that ends with this process."""
        self.encoders.close()
        if self.services.store.kind == "memory":  # this process's own sessions, which end with it (a shared store's
            await asyncio.to_thread(self.shm.stop)   # sessions live on, served by other processes: their files too)

    def encode(self, img: Image.Image | ImageEntry, fmt: str) -> bytes:
        """Encode for output (in a worker thread: an entry's pixels may first have to be loaded). A derived image
        shared by several sessions (a view returned as it is, a document stitch) is encoded once for them all."""
        s = self.settings
        pixels = img.pixels if isinstance(img, ImageEntry) else img
        started = time.perf_counter()
        data = self.services.shared.encoding(pixels, fmt, partial(
            encode_image, pixels, fmt, png_level=s.png_compress_level, jpeg_quality=s.jpeg_quality,
            webp_quality=s.webp_quality, png_encoder=s.png_encoder,
            fpng_writer=self.encoders.fpng if self.encoders.processes else None))
        self._stage.labels("encode").observe(time.perf_counter() - started)
        return data

    def run_and_encode(self, tool: Tool, ctx: ToolContext, args: Any, fmt: str, delivery: str,
                       store_png: bool, binary: bool = False) -> tuple[ToolOutput, list[Delivered], list[Blob]]:
        """Runs in a worker thread: the tool itself, then the encodings its delivery (and the store) need.
        `binary`: inline images stay bytes (a msgpack answer carries them as they are, no base64). A store that
        holds raw pixels for the node (`SessionStore.hold_pixels`) is given the new images here, instead of a PNG, or
        their recipes (`SessionStore.derive_pixels`) where the tool says how it made them."""
        try:
            output = tool.run(ctx, args)
        except ToolFailure as exc:
            return ToolOutput.failure(exc.text, exc.code), [], []
        delivered = []
        stored: list[Blob] = []
        for offset, (img, entry) in enumerate(output.returned()):
            shown = output.shown_form(offset) if entry is None else None
            if shown is not None:  # the copy the model is shown: its bytes are what is delivered, and recorded
                output.encoded[len(output.encoded):offset + 1] = [None] * (offset + 1 - len(output.encoded))
                output.encoded[offset] = (self.encode(shown, fmt), OUTPUT_FORMATS[fmt])
            own_bytes = output.encoded_form(offset) is not None and output.encoded_is_pixels and shown is None
            if entry is None and not own_bytes and not unread(img):
                img.load()  # pixels the session will hold (a result defined by its bytes is held, and stored, as them)
            data, mime = None, OUTPUT_FORMATS[fmt]
            if delivery == "shm":  # the raw pixels, written once: nothing encoded for the trainer
                started = time.perf_counter()
                delivered.append(Delivered(mime="application/octet-stream",
                                           shm=self.shm.write(ctx.session_id, ctx.observation_key(offset),
                                                              shown if shown is not None else img)))
                self._stage.labels("write").observe(time.perf_counter() - started)
            elif delivery != "ref":
                encoded = output.encoded_form(offset)
                if encoded is not None:  # the system's own bytes for this result (they decode to `img` if it says so)
                    data, mime = encoded
                elif entry is not None and entry.is_input and entry.source_mime is not None and delivery == "inline":
                    # An input returned again: its uploaded bytes are exact and cost no encoding.
                    data, mime = entry.source_bytes or b"", entry.source_mime or "application/octet-stream"
                else:
                    data = self.encode(img, fmt)
                if delivery == "inline":
                    started = time.perf_counter()
                    text = data if binary else pybase64.b64encode_as_string(data)
                    self._stage.labels("base64").observe(time.perf_counter() - started)
                    delivered.append(Delivered(mime=mime, data=text))
                else:
                    path = self._write_output(ctx.session_id, ctx.observation_key(offset), mime, data)
                    delivered.append(Delivered(mime=mime, path=str(path)))
            if store_png and entry is None:  # new pixels, kept losslessly (reused images are stored already)
                # Bytes already made that decode to exactly these pixels are kept as they are: a PNG delivered, or
                # the system's own encoding of the result (Pixel-Reasoner's JPEG, whose decoding *is* the result).
                same = data is not None and (own_bytes or (output.encoded_form(offset) is None and mime == "image/png"))
                stored.append(data if same else self._kept(ctx, offset, img, output.derivation(offset))
                              or self.encode(img, "png"))
            else:
                stored.append(None)
        return output, delivered, stored

    def _kept(self, ctx: ToolContext, offset: int, img: Image.Image,
              derivation: Derivation | None) -> HeldPixels | DerivedPixels | None:
        """The new image kept by the store as its recipe, or else its raw pixels written once where the node's
        processes read them, if the store does either (else it needs a PNG)."""
        if derivation is not None:
            derived = self.services.store.derive_pixels(ctx.session_id, derivation, img)
            if derived is not None:
                return derived  # a crop made on demand (`Derivation.image`) stays unread
        img.load()
        started = time.perf_counter()
        held = self.services.store.hold_pixels(ctx.session_id, ctx.observation_key(offset), img)
        if held is not None:
            self._stage.labels("hold").observe(time.perf_counter() - started)
        return held

    async def remove_outputs(self, session_id: str) -> None:
        """The files `path` delivery wrote for a session, removed with it."""
        directory = self.settings.resolved_output_dir().resolve() / session_id
        if _SESSION_ID.match(session_id) and directory.is_dir():
            await asyncio.to_thread(self._remove_folder, directory)
        await asyncio.to_thread(self.shm.remove, session_id)

    async def sweep_shm(self) -> int:
        """`shm` files of sessions that ended without a release, and files past their expiry."""
        names = await asyncio.to_thread(self.shm.sessions)
        gone = [name for name in names if not await self.services.store.holds(name)]
        return await asyncio.to_thread(self.shm.sweep, gone)

    async def sweep_outputs(self, min_age_s: float = 60.0) -> int:
        """Output folders of sessions that ended without a release (expired, evicted, another replica's
        restart): removed once untouched for `min_age_s`. Only folders named like a session id are touched,
        since the directory may be shared with the trainer."""
        root = self.settings.resolved_output_dir().resolve()
        if not root.is_dir():
            return 0
        removed, now = 0, time.time()
        for directory in await asyncio.to_thread(lambda: [d for d in root.iterdir() if d.is_dir()]):
            if (_SESSION_ID.match(directory.name) and now - directory.stat().st_mtime >= min_age_s
                    and not await self.services.store.holds(directory.name)):
                await asyncio.to_thread(self._remove_folder, directory)
                removed += 1
        measured = await asyncio.to_thread(_output_bytes, root)
        with self._output_lock:
            self._output_bytes = measured
        return removed

    def _remove_folder(self, directory: Path) -> None:
        freed = _folder_bytes(directory)
        shutil.rmtree(directory, True)
        with self._output_lock:
            if self._output_bytes is not None:
                self._output_bytes = max(0, self._output_bytes - freed)

    def _write_output(self, session_id: str, key: str, mime: str, data: bytes) -> Path:
        root = self.settings.resolved_output_dir().resolve()
        with self._output_lock:
            if self._output_bytes is None:
                self._output_bytes = _output_bytes(root)
            if self._output_bytes + len(data) > self.settings.output_dir_max_bytes:
                raise InsufficientStorage(
                    f"the output directory holds {self._output_bytes} bytes of delivered files, at its bound of "
                    f"{self.settings.output_dir_max_bytes}; release sessions, or use inline or ref delivery")
            self._output_bytes += len(data)
        directory = root / session_id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{key}.{_EXTENSIONS.get(mime, 'bin')}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        return path

    def build_output(self, session: SessionMap, name: str, output: ToolOutput, delivered: list[Delivered],
                     base_url: str) -> tuple[ToolResult, list[ImageEntry]]:
        """The call's result and the entries its images will be registered as (the store commits them)."""
        new_entries = []
        shown_sizes: list[tuple[int, int] | None] = []
        lazy = not self.services.store.stores_encoded
        for offset, (img, source) in enumerate(output.returned()):
            shown = output.shown_form(offset) if source is None else None
            view, view_error = (shown.size, None) if shown is not None else compute_view(session.view_rule, img.size)
            encoded = output.encoded_form(offset) if source is None else None
            # A result defined by its encoded bytes (Pixel-Reasoner's JPEG) is held as those bytes, a tenth of
            # its pixels, and decoded again only if a later call reads it: decoding them gives the same pixels.
            # (Not a result shown as a resized copy, nor one whose bytes are only what the model is shown: those
            # bytes are not the result's pixels.)
            held_encoded = encoded is not None and lazy and shown is None and output.encoded_is_pixels
            on_demand = img if unread(img) else None  # cut by whatever reads it first
            entry = ImageEntry(
                key=session.observation_key(offset), index=-1, origin=f"tool:{name}",
                pixels=img if not held_encoded and on_demand is None else None, size=img.size,
                load_pixels=partial(_decode_exact, encoded[0]) if held_encoded and encoded is not None
                else on_demand.read if on_demand is not None else None,
                view_size=view, view_error=view_error, alias_of=source.key if source is not None else None,
            )
            if encoded is not None:
                entry.delivered = (_FORMAT_OF[encoded[1]], encoded[0])
            new_entries.append(entry)
            shown_sizes.append(shown.size if shown is not None else None)
        images = []
        fmt = session.settings.output.format
        for i, entry in enumerate(new_entries):
            width, height = shown_sizes[i] or entry.size  # what is delivered: the copy the model is shown, if any
            out = ResultImage(key=entry.key, index=len(session.images) + i, width=width, height=height,
                              mime=OUTPUT_FORMATS[fmt])
            if i < len(delivered):
                out.mime = delivered[i].mime
                out.data = delivered[i].data
                out.path = delivered[i].path
                out.shm = delivered[i].shm
            if session.settings.output.delivery == "ref":
                out.url = f"{base_url}/v1/sessions/{session.id}/images/{entry.key}"
            images.append(out)
        error = None if output.ok else ErrorInfo(code=output.error_code or "tool_error", message=output.text)
        return ToolResult(ok=output.ok, tool=name, text=output.text, images=images, error=error,
                          meta=output.meta), new_entries

    async def replay(self, session: SessionMap, recorded: RecordedOutcome, binary: bool) -> ToolResult:
        """A recorded outcome answered again: its inline images read back from the session, byte for byte."""
        fields = dict(recorded.result)
        inline = fields.pop("inline", [])
        result = ToolResult.model_validate(fields)
        for image, was_inline in zip(result.images, inline, strict=False):
            if was_inline:
                data = await self._delivered_bytes(session, image.key, image.mime)
                image.data = data if binary else pybase64.b64encode_as_string(data)
        return result

    async def _delivered_bytes(self, session: SessionMap, key: str, mime: str) -> bytes:
        """The bytes an image was delivered as: an input returned again as uploaded, the system's own encoding,
        else the session's format (encoding is deterministic: the same pixels give the same bytes)."""
        store = self.services.store
        entry = image_by_ref(session, key)
        source = session.by_key.get(entry.alias_of) if entry.alias_of else None
        if source is not None and source.is_input and source.source_mime == mime:
            return await store.read_source(session, source)
        fmt = _FORMAT_OF[mime]
        data = await store.cached_encoding(session, entry, fmt)
        if data is None:
            data = await self.services.pool.run(self.encode, entry, fmt)
        return data

    async def image_bytes(self, session_id: str, key: str, fmt: str | None = None) -> tuple[bytes, str]:
        """An image's bytes: inputs as uploaded, tool images in the session's output format."""
        store = self.services.store
        session = await store.get(session_id)
        entry = image_by_ref(session, key)
        if fmt is None and entry.is_input and entry.source_mime is not None:  # a video frame may have no source
            return await store.read_source(session, entry), entry.source_mime
        fmt = fmt or session.settings.output.format
        if fmt not in OUTPUT_FORMATS:
            raise BadRequest(f"format must be one of {list(OUTPUT_FORMATS)}")
        data = await store.cached_encoding(session, entry, fmt)
        if data is None:
            data = await self.services.pool.run(self.encode, entry, fmt)
            await store.keep_encoding(session, entry, fmt, data)
        return data, OUTPUT_FORMATS[fmt]

    async def thumbnail(self, session_id: str, key: str, max_side: int) -> bytes:
        """A JPEG no larger than `max_side` on its long side (a page showing fifty images stays light)."""
        session = await self.services.store.get(session_id)
        entry = image_by_ref(session, key)
        return await self.services.pool.run(_thumbnail, entry, max_side, self.settings.jpeg_quality)


def image_by_ref(session: SessionMap, key: str) -> ImageEntry:
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


def _folder_bytes(directory: Path) -> int:
    total = 0
    for file in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):  # a file replaced or removed meanwhile
            total += file.stat().st_size
    return total


def _output_bytes(root: Path) -> int:
    """Bytes of the session folders' files under the output directory (the trainer's own files not counted)."""
    if not root.is_dir():
        return 0
    return sum(_folder_bytes(d) for d in root.iterdir() if d.is_dir() and _SESSION_ID.match(d.name))


def _decode_exact(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image
