"""A session's indexed memory map: its images (`ImageEntry`) and texts, addressed by key or 0-based index.

A session is one trajectory. These types are what tools and the core see of it; where sessions live (this
process, Redis) is the business of `toolserver.stores`, which builds and keeps them.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from PIL import Image

from toolserver.errors import BadRequest, TooLarge
from toolserver.geometry import CoordError, ViewRule
from toolserver.lazyimage import LazyImage
from toolserver.models import ImageInfo, SessionSettings

INPUT_PREFIX = "original_image"
OBSERVATION_PREFIX = "observation_"
_INPUT_KEY = re.compile(rf"{INPUT_PREFIX}_\d+")
_OBSERVATION_KEY = re.compile(rf"{OBSERVATION_PREFIX}([1-9]\d{{0,8}})")
PixelBox = tuple[int, int, int, int]  # left, top, right, bottom, in an image's pixels
OUTCOMES_KEPT = 16  # recorded outcomes a session keeps for retries (its latest calls)


@dataclass(frozen=True)
class RecordedOutcome:
    """A call's result as first answered, kept under its idempotency key so that a retry gets it again instead
    of running the tool twice. `result` is the ToolResult as JSON without inline image bytes (they are read back
    from the session); `fingerprint` names the tool and arguments the key was first used with."""

    key: str
    fingerprint: str
    result: dict[str, Any]


@dataclass(frozen=True)
class HeldPixels:
    """A new tool image whose raw pixels the store already holds where every server process of the node reads
    them (`SessionStore.hold_pixels`): the name it holds them under and the bytes they take."""

    name: str
    nbytes: int


@dataclass(frozen=True)
class Derivation:
    """How a tool's new image is remade, exactly, from an image its session holds: `source`'s pixels cropped to
    `box` (left, top, right, bottom, in its pixels), then, where `size` is given, resized to it with
    `toolserver.resample.resize_bicubic`. A tool that says so (`ToolOutput.derived`) makes the image with `make`,
    so that a store may keep this recipe in place of the pixels (`SessionStore.derive_pixels`)."""

    source: ImageEntry
    box: tuple[int, int, int, int]
    size: tuple[int, int] | None = None

    def make(self, pixels: Image.Image) -> Image.Image:
        return self._finish(pixels.crop(self.box))

    def cut(self) -> Image.Image:
        """`make(source.pixels)`, reading only the box of the source where its store can (`ImageEntry.region`)."""
        return self._finish(self.source.region(self.box))

    def image(self, on_demand: bool = False) -> Image.Image:
        """`cut()`; `on_demand` (nothing reads the image in its call: `ToolContext.pixels_on_demand`), an image of
        the same mode and size that cuts itself when first read, where the source's mode is known without reading
        it (`ImageEntry.mode`)."""
        mode = self.source.mode() if on_demand else None
        if mode is None:
            return self.cut()
        left, top, right, bottom = self.box
        return LazyImage(mode, self.size or (right - left, bottom - top), self.cut)

    def _finish(self, crop: Image.Image) -> Image.Image:
        if self.size is None:
            return crop
        from toolserver.resample import resize_bicubic  # numba's import, only where a resize is wanted

        return resize_bicubic(crop, self.size)


@dataclass(frozen=True)
class DerivedPixels:
    """A new tool image a store keeps as its recipe (`Derivation`): the key of the session's image it is made from,
    the crop box and size, how many recipes deep it is, and the bytes its pixels take (charged to the session)."""

    source: str
    box: tuple[int, int, int, int]
    size: tuple[int, int] | None
    depth: int
    nbytes: int


# What a store is given to keep an image: its encoding, its held pixels, its recipe, or nothing.
Blob = bytes | HeldPixels | DerivedPixels | None


@dataclass
class CallCommit:
    """Everything a tool call leaves in its session, written at once or not at all: its new images (and, for
    stores that keep bytes, their stored encodings), whether it counts toward the call limit, its call-log
    record, and its outcome for retries."""

    entries: list[ImageEntry] = field(default_factory=list)
    blobs: Sequence[Blob] = ()
    counted: bool = True
    record: str = ""
    outcome: RecordedOutcome | None = None


def observation_number(key: str) -> int | None:
    """N of a key `observation_N` (N from 1, no leading zeros, as the counter writes them), else None."""
    match = _OBSERVATION_KEY.fullmatch(key)
    return int(match.group(1)) if match else None


class ImageEntry:
    """One image of a session. Its pixels are RGB and never modified after registration.

    Entries of the in-memory store hold their pixels; entries read back from Redis hold a loader that
    fetches and decodes them on first use (in the tool's worker thread, through the replica's cache).
    """

    __slots__ = (
        "_load_mode",
        "_load_once",
        "_load_pixels",
        "_load_region",
        "_load_source",
        "_pixels",
        "_source_bytes",
        "alias_of",
        "blob_format",
        "blob_key",
        "content",
        "delivered",
        "depth",
        "encoded",
        "index",
        "key",
        "origin",
        "preview",
        "size",
        "source_mime",
        "view_error",
        "view_size",
        "views",
    )

    def __init__(self, *, key: str, index: int, origin: str, size: tuple[int, int] | None = None,
                 pixels: Image.Image | None = None, view_size: tuple[int, int] | None,
                 view_error: str | None = None, source_bytes: bytes | None = None, source_mime: str | None = None,
                 alias_of: str | None = None, load_pixels: Callable[[], Image.Image] | None = None,
                 load_source: Callable[[], bytes] | None = None, content: str | None = None,
                 load_region: Callable[[PixelBox], Image.Image | None] | None = None,
                 load_once: Callable[[], Image.Image] | None = None, load_mode: Callable[[], str | None] | None = None):
        if pixels is None and load_pixels is None:
            raise ValueError("an image entry needs its pixels or a way to load them")
        self.key = key
        self.index = index
        self.origin = origin  # "input" or "tool:<name>"
        self.size = size if size is not None else pixels.size  # type: ignore[union-attr]
        self.view_size = view_size
        self.view_error = view_error
        self.source_mime = source_mime
        self.alias_of = alias_of  # lookback returns an earlier image: same pixels, new key
        self.content = content  # an input's digest and alpha rule: inputs alike share what is derived from them
        self.encoded: dict[str, bytes] = {}  # output encodings, by format (in-memory store)
        # The system's own encoding this image was delivered in (Pixel-Reasoner's JPEG): (format, bytes). Not a
        # cache: encoding the pixels again would not give these bytes, and a replayed call must.
        self.delivered: tuple[str, bytes] | None = None
        self.views: dict[str, Image.Image] = {}  # model views (whole-image resizes), by rule (in-memory store)
        self.blob_key: str | None = None  # Redis store: the stored bytes these pixels decode from
        self.blob_format: str | None = None  # "source" (as uploaded), "png", or the format of `delivered`
        self.depth = 0  # Redis store: how many recipes deep its pixels are made (`DerivedPixels`), 0 for stored ones
        self._pixels = pixels
        self._source_bytes = source_bytes  # what was uploaded (inputs only)
        self._load_pixels = load_pixels
        self._load_source = load_source
        self._load_region = load_region  # a part of the pixels without the whole (the node's shared memory), or None
        self._load_once = load_once  # the pixels past the store's caches, kept nowhere (`pixels_once`), or None
        self._load_mode = load_mode  # their mode without them (the node's file header), or None
        # A small copy of the pixels, made where they cannot stay loaded until the archive's thumbnail is written
        self.preview: Image.Image | None = None

    @property
    def pixels(self) -> Image.Image:
        if self._pixels is None:
            assert self._load_pixels is not None
            self._pixels = self._load_pixels()
        return self._pixels

    def pixels_once(self) -> Image.Image:
        """The pixels for one read that keeps them nowhere: those loaded already, else read past the store's caches
        where it can (a released session's images for the archive: a node would copy each into its shared memory)."""
        if self._pixels is not None or self._load_once is None:
            return self.pixels
        return self._load_once()

    def mode(self) -> str | None:
        """The pixels' mode without reading them: the loaded pixels', else the store's word where it has one (a
        node's file header), else None (unknown until they are read)."""
        if self._pixels is not None:
            return self._pixels.mode
        return self._load_mode() if self._load_mode is not None else None

    def region(self, box: PixelBox) -> Image.Image:
        """`pixels.crop(box)` (left, top, right, bottom): where the pixels are not loaded and the store can read a
        part of them, only that part is read (a zoom into a large photograph need not copy all of it)."""
        inside = 0 <= box[0] < box[2] <= self.size[0] and 0 <= box[1] < box[3] <= self.size[1]
        if self._pixels is None and self._load_region is not None and inside:
            part = self._load_region(box)
            if part is not None:
                return part
        return self.pixels.crop(box)

    @property
    def loaded(self) -> bool:
        return self._pixels is not None

    @property
    def decoded(self) -> bool:
        """Whether its pixels are in memory: loaded, and not an image file that Pillow has opened but not yet read
        (a tool's encoded result, decoded only if a later call reads it)."""
        return self._pixels is not None and not getattr(self._pixels, "tile", None)

    def drop_pixels(self, reload: Callable[[], Image.Image]) -> None:
        """Forget the decoded pixels (a reader holding them keeps its reference); `reload` gives the same pixels
        again to whatever reads them next."""
        self._load_pixels = reload
        self._pixels = None

    @property
    def source_bytes(self) -> bytes | None:
        if self._source_bytes is None and self._load_source is not None:
            self._source_bytes = self._load_source()
        return self._source_bytes

    @property
    def pixels_format(self) -> str:
        """What a store calls the PNG of a tool image's pixels: "png", or "pixels" where a PNG it was delivered as
        (a copy shown in its place, `ToolOutput.shown`) is what a PNG fetch returns."""
        return "pixels" if self.delivered is not None and self.delivered[0] == "png" else "png"

    @property
    def is_input(self) -> bool:
        return self.origin == "input"

    @property
    def nbytes(self) -> int:
        """What the in-memory store charges: decoded pixels (not for aliases), uploaded bytes, and the caches."""
        pixel_bytes = 0 if self.alias_of else self.size[0] * self.size[1] * 3
        return pixel_bytes + len(self._source_bytes or b"") + self.cache_nbytes

    @property
    def cache_nbytes(self) -> int:
        """Bytes of what can be recomputed: output encodings and model views."""
        return sum(len(b) for b in self.encoded.values()) + sum(image_nbytes(v) for v in self.views.values())

    def drop_caches(self) -> int:
        """Forget the encodings and views; returns the bytes freed."""
        freed = self.cache_nbytes
        self.encoded = {}
        self.views = {}
        return freed

    def info(self) -> ImageInfo:
        vw, vh = self.view_size if self.view_size else (None, None)
        return ImageInfo(key=self.key, index=self.index, width=self.size[0], height=self.size[1],
                         view_width=vw, view_height=vh, view_error=self.view_error, origin=self.origin)


def image_nbytes(image: Image.Image) -> int:
    return image.width * image.height * len(image.getbands())


def find_image(images: list[ImageEntry] | tuple[ImageEntry, ...], ref: str | int) -> ImageEntry | None:
    """An image by key or 0-based index (booleans are neither)."""
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        return images[ref] if 0 <= ref < len(images) else None
    return next((e for e in images if e.key == ref), None)


def compute_view(rule: ViewRule, size: tuple[int, int]) -> tuple[tuple[int, int] | None, str | None]:
    try:
        return rule.view_size(*size), None
    except CoordError as exc:
        return None, str(exc)


class TextMap(Protocol):
    """A session's texts by key: a dict in memory, a lazy view of Redis hashes elsewhere. `copy()` gives what a
    tool may read while texts are added beside it (a dict copies; a remote view, read on demand, is itself)."""

    def __getitem__(self, key: str) -> str: ...
    def __contains__(self, key: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def copy(self) -> Mapping[str, str]: ...


class SessionMap:
    """One session's state as a request sees it. The memory store keeps these objects; the Redis store
    builds a fresh one from Redis for every request."""

    def __init__(self, session_id: str, settings: SessionSettings, view_rule: ViewRule, ttl_s: float,
                 texts: TextMap | None = None, text_lengths: dict[str, int] | None = None):
        self.id = session_id
        self.settings = settings
        self.owner: str | None = None  # the creating key's owner id (toolserver.ownership); None: anyone's
        self.view_rule = view_rule
        self.ttl_s = ttl_s
        self.images: list[ImageEntry] = []
        self.by_key: dict[str, ImageEntry] = {}
        self.texts: TextMap = texts if texts is not None else {}
        self.text_lengths: dict[str, int] = text_lengths if text_lengths is not None else {}
        self.observations = 0
        self.tool_calls = 0
        self.nbytes = 0
        self.cache_nbytes = 0  # of `nbytes`: encodings and model views, dropped first under pressure
        self.last_used = time.monotonic()
        self.created = time.time()
        self.calls: deque[str] = deque()  # the call log (JSON records), in-memory store
        self.calls_dropped = 0
        self.outcomes: deque[RecordedOutcome] = deque(maxlen=OUTCOMES_KEPT)  # in-memory store
        self.fence: str | None = None  # the lock token of the call holding the session (Redis store)

    # -- naming -------------------------------------------------------------------------------
    def next_input_key(self, taken: set[str]) -> str:
        """`original_image`, then `original_image_1`, … (caller-named images do not use up numbers)."""
        n = sum(1 for k in taken if k == INPUT_PREFIX or _INPUT_KEY.fullmatch(k))
        key = INPUT_PREFIX if n == 0 else f"{INPUT_PREFIX}_{n}"
        while key in taken:
            n += 1
            key = f"{INPUT_PREFIX}_{n}"
        return key

    def observation_key(self, offset: int = 0) -> str:
        """The key the (offset+1)-th image returned by the next tool call will get."""
        return f"{OBSERVATION_PREFIX}{self.observations + 1 + offset}"

    def next_text_key(self, taken: set[str] | None = None) -> str:
        taken = taken if taken is not None else set(self.text_lengths)
        n = 0
        while f"text_{n}" in taken:
            n += 1
        return f"text_{n}"

    # -- lookup -------------------------------------------------------------------------------
    def resolve(self, ref: str | int) -> ImageEntry | None:
        return find_image(self.images, ref)

    @property
    def keys(self) -> list[str]:
        return [e.key for e in self.images]

    def append_image(self, entry: ImageEntry) -> ImageEntry:
        if entry.key in self.by_key:
            raise BadRequest(f"image key {entry.key!r} already exists in this session", code="duplicate_key")
        entry.index = len(self.images)
        self.images.append(entry)
        self.by_key[entry.key] = entry
        return entry

    def expires_in(self, now: float | None = None) -> float:
        return max(0.0, self.last_used + self.ttl_s - (now if now is not None else time.monotonic()))


def plan_texts(session: SessionMap, items: list[tuple[str | None, str]], *, max_texts: int,
               max_chars: int) -> list[tuple[str, str]]:
    """Check texts to add and name the unnamed ones (`text_0`, `text_1`, …); a named text replaces its key."""
    if len(session.text_lengths) + len(items) > max_texts:
        raise TooLarge(f"at most {max_texts} texts per session")
    taken = set(session.text_lengths)
    named = []
    for key, text in items:
        if len(text) > max_chars:
            raise TooLarge(f"a text is limited to {max_chars} characters")
        if key is not None and (not key or len(key) > 128 or key in (".", "..")):
            raise BadRequest(f"text key {key!r} must have 1 to 128 characters and not be '.' or '..'")
    for key, text in items:
        key = key or session.next_text_key(taken)
        taken.add(key)
        named.append((key, text))
    return named
