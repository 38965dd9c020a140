"""Sessions and their indexed memory map; the store interface and the in-memory store (TTL, byte
budgets, LRU eviction). The Redis store, for several replicas, is in `toolserver.redis_store`.

A session is one trajectory. Its images are addressed by key or 0-based index; its texts by key.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from PIL import Image

from toolserver.errors import BadRequest, NotFound, SessionGone, TooLarge
from toolserver.geometry import CoordError, ViewRule
from toolserver.models import ImageInfo, SessionSettings

INPUT_PREFIX = "original_image"
OBSERVATION_PREFIX = "observation_"
_INPUT_KEY = re.compile(rf"{INPUT_PREFIX}_\d+")
_OBSERVATION_KEY = re.compile(rf"{OBSERVATION_PREFIX}([1-9]\d{{0,8}})")


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
        "_load_pixels",
        "_load_source",
        "_pixels",
        "_source_bytes",
        "alias_of",
        "blob_format",
        "blob_key",
        "encoded",
        "index",
        "key",
        "origin",
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
                 load_source: Callable[[], bytes] | None = None):
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
        self.encoded: dict[str, bytes] = {}  # output encodings, by format (in-memory store)
        self.views: dict[str, Image.Image] = {}  # model views (whole-image resizes), by rule (in-memory store)
        self.blob_key: str | None = None  # Redis store: the stored bytes these pixels decode from
        self.blob_format: str | None = None  # "source" (as uploaded) or "png"
        self._pixels = pixels
        self._source_bytes = source_bytes  # what was uploaded (inputs only)
        self._load_pixels = load_pixels
        self._load_source = load_source

    @property
    def pixels(self) -> Image.Image:
        if self._pixels is None:
            assert self._load_pixels is not None
            self._pixels = self._load_pixels()
        return self._pixels

    @property
    def loaded(self) -> bool:
        return self._pixels is not None

    @property
    def source_bytes(self) -> bytes | None:
        if self._source_bytes is None and self._load_source is not None:
            self._source_bytes = self._load_source()
        return self._source_bytes

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


CALL_LOG_LIMIT = 1000  # call records a session keeps (its latest)


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    profile: str
    images: int
    calls: int
    age_s: float | None


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


class Session:
    """One session's state as a request sees it. The memory store keeps these objects; the Redis store
    builds a fresh one from Redis for every request."""

    def __init__(self, session_id: str, settings: SessionSettings, view_rule: ViewRule, ttl_s: float,
                 texts: Mapping[str, str] | None = None, text_lengths: dict[str, int] | None = None):
        self.id = session_id
        self.settings = settings
        self.view_rule = view_rule
        self.ttl_s = ttl_s
        self.images: list[ImageEntry] = []
        self.by_key: dict[str, ImageEntry] = {}
        self.texts: Mapping[str, str] = texts if texts is not None else {}
        self.text_lengths: dict[str, int] = text_lengths if text_lengths is not None else {}
        self.observations = 0
        self.tool_calls = 0
        self.nbytes = 0
        self.cache_nbytes = 0  # of `nbytes`: encodings and model views, dropped first under pressure
        self.last_used = time.monotonic()
        self.created = time.time()
        self.calls: deque[str] = deque()  # the call log (JSON records), in-memory store
        self.calls_dropped = 0

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


def plan_texts(session: Session, items: list[tuple[str | None, str]], *, max_texts: int,
               max_chars: int) -> list[tuple[str, str]]:
    """Check texts to add and name the unnamed ones (`text_0`, `text_1`, …); a named text replaces its key."""
    if len(session.text_lengths) + len(items) > max_texts:
        raise TooLarge(f"at most {max_texts} texts per session")
    taken = set(session.text_lengths)
    named = []
    for key, text in items:
        if len(text) > max_chars:
            raise TooLarge(f"a text is limited to {max_chars} characters")
        if key is not None and (not key or len(key) > 128):
            raise BadRequest(f"text key {key!r} must have 1 to 128 characters")
    for key, text in items:
        key = key or session.next_text_key(taken)
        taken.add(key)
        named.append((key, text))
    return named


class SessionStore(ABC):
    """Where sessions live. The core calls only these methods, so the backends are interchangeable."""

    kind: str
    # Whether tool images must come with an encoding to store (the in-memory store keeps pixels).
    stores_encoded: bool = False

    @abstractmethod
    async def create(self, settings: SessionSettings, ttl_s: float) -> Session: ...

    @abstractmethod
    async def get(self, session_id: str) -> Session:
        """The session, touched (its idle timer restarts); 404 unknown, 410 expired or evicted."""

    @abstractmethod
    def exclusive(self, session_id: str) -> AbstractAsyncContextManager[Session]:
        """The session, held by this caller alone (one tool call at a time per session)."""

    @abstractmethod
    def mutating(self, session_id: str) -> AbstractAsyncContextManager[Session]:
        """The session, for adding images or texts (exclusive where the store is shared)."""

    @abstractmethod
    async def release(self, session_id: str) -> None: ...

    @abstractmethod
    async def add_images(self, session: Session, entries: list[ImageEntry],
                         blobs: Sequence[bytes | None] = (), *, observations: int = 0) -> None:
        """Charge, index and keep `entries` (`blobs`: their stored encodings, for stores that keep bytes);
        `observations` tool images are counted. All or nothing."""

    @abstractmethod
    async def add_texts(self, session: Session, texts: list[tuple[str, str]]) -> None: ...

    @abstractmethod
    async def count_call(self, session: Session) -> None:
        """One more tool call in this session (counted before the call runs, as the limits need)."""

    @abstractmethod
    async def keep_encoding(self, session: Session, entry: ImageEntry, fmt: str, data: bytes) -> None:
        """Remember an encoding of `entry`, if the budget allows; never fails."""

    @abstractmethod
    async def cached_encoding(self, session: Session, entry: ImageEntry, fmt: str) -> bytes | None: ...

    @abstractmethod
    async def log_call(self, session: Session, record: str) -> None:
        """Append a call record (JSON) to the session's log: the last CALL_LOG_LIMIT are kept, counted in the
        byte budget; older ones, and one the budget cannot hold, are dropped and counted. Never fails a call."""

    @abstractmethod
    async def call_log(self, session: Session) -> tuple[list[str], int]:
        """The session's call records (JSON, oldest first) and how many were dropped."""

    @abstractmethod
    async def list_sessions(self, offset: int, limit: int) -> tuple[list[SessionSummary], int]:
        """Live sessions, oldest first, a page of them, and how many there are."""

    @abstractmethod
    def view_lookup(self, session: Session) -> Callable[[ImageEntry, str], Image.Image | None]:
        """How a tool thread finds a model view computed by an earlier call (`ToolContext.view`)."""

    @abstractmethod
    async def keep_views(self, session: Session, views: Sequence[tuple[ImageEntry, str, Image.Image]]) -> None:
        """Remember the views a call computed, if the budget allows; never fails, never evicts a session."""

    @abstractmethod
    async def read_source(self, session: Session, entry: ImageEntry) -> bytes:
        """An input image's bytes as uploaded."""

    @abstractmethod
    async def is_live(self, session: Session) -> bool: ...

    async def check(self) -> str | None:
        """None when the store can serve, else why not (for /readyz)."""
        return None

    def sweep(self) -> int:
        return 0

    def stats(self) -> dict[str, int | str]:
        return {"kind": self.kind}

    async def close(self) -> None:
        return None


class MemoryStore(SessionStore):
    """In-memory sessions: idle expiry, a byte budget per session and in total, LRU eviction.

    Written by hand rather than with cachetools: a session's size changes after insertion, each
    session has its own TTL, and ids that expired or were evicted must be remembered to answer 410.
    All mutation happens on the event loop thread; tool threads only read images, which are immutable
    once registered, so the only lock is the per-session call lock.
    """

    kind = "memory"

    def __init__(self, *, session_max_bytes: int, total_max_bytes: int, tombstones: int = 100_000):
        self.session_max_bytes = session_max_bytes
        self.total_max_bytes = total_max_bytes
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._locks: dict[str, asyncio.Lock] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._tombstone_limit = tombstones
        self.total_bytes = 0
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, settings: SessionSettings, ttl_s: float) -> Session:
        assert settings.view is not None
        session = Session(secrets.token_urlsafe(24), settings, settings.view.rule(), ttl_s, texts={})
        self._sessions[session.id] = session
        self._locks[session.id] = asyncio.Lock()
        return session

    async def get(self, session_id: str) -> Session:
        return self._get(session_id)

    def _get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            reason = self._gone.get(session_id)
            if reason:
                raise SessionGone(f"session {session_id} has {reason}; create a new session")
            raise NotFound(f"no session {session_id}", code="unknown_session")
        now = time.monotonic()
        if session.expires_in(now) <= 0:
            self._drop(session, "expired (idle longer than its ttl)")
            self.expired += 1
            raise SessionGone(f"session {session_id} has expired (idle longer than its ttl); create a new session")
        session.last_used = now
        self._sessions.move_to_end(session_id)
        return session

    @asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[Session]:
        session = self._get(session_id)
        async with self._locks[session.id]:
            yield session

    @asynccontextmanager
    async def mutating(self, session_id: str) -> AsyncIterator[Session]:
        # Additions run on the event loop between awaits: they need no lock, and must not wait for a tool.
        yield self._get(session_id)

    async def is_live(self, session: Session) -> bool:
        return self._sessions.get(session.id) is session

    async def release(self, session_id: str) -> None:
        self._drop(self._get(session_id), None)

    async def add_images(self, session: Session, entries: list[ImageEntry],
                         blobs: Sequence[bytes | None] = (), *, observations: int = 0) -> None:
        taken = set(session.by_key)
        for entry in entries:
            if entry.key in taken:
                raise BadRequest(f"image key {entry.key!r} already exists in this session", code="duplicate_key")
            taken.add(entry.key)
        self._charge(session, sum(e.nbytes for e in entries))
        for entry in entries:
            session.append_image(entry)
        session.observations += observations

    async def add_texts(self, session: Session, texts: list[tuple[str, str]]) -> None:
        replaced = sum(len(session.texts[k].encode()) for k in {k for k, _ in texts} if k in session.texts)
        self._charge(session, sum(len(t.encode()) for _, t in texts) - replaced)
        stored = session.texts
        assert isinstance(stored, dict)
        for key, text in texts:
            stored[key] = text
            session.text_lengths[key] = len(text)

    async def count_call(self, session: Session) -> None:
        session.tool_calls += 1

    async def keep_encoding(self, session: Session, entry: ImageEntry, fmt: str, data: bytes) -> None:
        if session.by_key.get(entry.key) is entry and self._fits(session, len(data)):  # still held, room left
            self._add_bytes(session, len(data), cache=True)
            entry.encoded[fmt] = data

    async def log_call(self, session: Session, record: str) -> None:
        if self._sessions.get(session.id) is not session:
            return
        while len(session.calls) >= CALL_LOG_LIMIT:
            self._add_bytes(session, -len(session.calls.popleft()))
            session.calls_dropped += 1
        if self._fits(session, len(record)):
            session.calls.append(record)
            self._add_bytes(session, len(record))
        else:
            session.calls_dropped += 1

    async def call_log(self, session: Session) -> tuple[list[str], int]:
        return list(session.calls), session.calls_dropped

    async def list_sessions(self, offset: int, limit: int) -> tuple[list[SessionSummary], int]:
        now = time.monotonic()
        live = sorted((s for s in self._sessions.values() if s.expires_in(now) > 0), key=lambda s: s.created)
        wall = time.time()
        page = [SessionSummary(s.id, s.settings.profile, len(s.images), s.tool_calls, wall - s.created)
                for s in live[offset:offset + limit]]
        return page, len(live)

    def view_lookup(self, session: Session) -> Callable[[ImageEntry, str], Image.Image | None]:
        return lambda entry, rule: entry.views.get(rule)

    async def keep_views(self, session: Session, views: Sequence[tuple[ImageEntry, str, Image.Image]]) -> None:
        for entry, rule, image in views:
            nbytes = image_nbytes(image)
            if session.by_key.get(entry.key) is entry and rule not in entry.views and self._fits(session, nbytes):
                self._add_bytes(session, nbytes, cache=True)
                entry.views[rule] = image

    async def cached_encoding(self, session: Session, entry: ImageEntry, fmt: str) -> bytes | None:
        return entry.encoded.get(fmt)

    async def read_source(self, session: Session, entry: ImageEntry) -> bytes:
        assert entry.source_bytes is not None
        return entry.source_bytes

    def _fits(self, session: Session, nbytes: int) -> bool:
        """Whether a cache of `nbytes` fits without shedding or evicting anything."""
        return (session.nbytes + nbytes <= self.session_max_bytes
                and self.total_bytes + nbytes <= self.total_max_bytes)

    def _add_bytes(self, session: Session, nbytes: int, *, cache: bool = False) -> None:
        session.nbytes += nbytes
        self.total_bytes += nbytes
        if cache:
            session.cache_nbytes += nbytes

    def _shed_caches(self, sessions: Sequence[Session], need: int) -> None:
        """Free at least `need` bytes of encodings and views (recomputable) from `sessions`, in order."""
        for session in sessions:
            if session.cache_nbytes <= 0:  # most sessions hold none: no walk over their images
                continue
            for entry in session.images:
                if need <= 0:
                    return
                freed = entry.drop_caches()
                self._add_bytes(session, -freed, cache=True)
                need -= freed

    def _charge(self, session: Session, nbytes: int) -> None:
        """Account for `nbytes` more held by `session`. Under pressure caches go first (this session's, then
        everyone's least recently used first), then least-recently-used other sessions are evicted."""
        if session.nbytes + nbytes > self.session_max_bytes:
            self._shed_caches([session], session.nbytes + nbytes - self.session_max_bytes)
        if session.nbytes + nbytes > self.session_max_bytes:
            raise TooLarge(
                f"session would hold {session.nbytes + nbytes} bytes, over its {self.session_max_bytes}-byte "
                "budget; release images or start a new session"
            )
        if nbytes > self.total_max_bytes:
            raise TooLarge(f"{nbytes} bytes is over the server's total budget of {self.total_max_bytes}")
        if self.total_bytes + nbytes > self.total_max_bytes:
            self._shed_caches(list(self._sessions.values()), self.total_bytes + nbytes - self.total_max_bytes)
        while self.total_bytes + nbytes > self.total_max_bytes:
            victim = next((s for s in self._sessions.values() if s is not session), None)
            if victim is None:
                raise TooLarge("the server's memory budget is exhausted")
            self._drop(victim, "been evicted under memory pressure (least recently used)")
            self.evicted += 1
        self._add_bytes(session, nbytes)

    def sweep(self) -> int:
        """Drop every expired session; returns how many."""
        now = time.monotonic()
        expired = [s for s in self._sessions.values() if s.expires_in(now) <= 0]
        for session in expired:
            self._drop(session, "expired (idle longer than its ttl)")
        self.expired += len(expired)
        return len(expired)

    def stats(self) -> dict[str, int | str]:
        return {"kind": self.kind, "sessions": len(self._sessions), "bytes_held": self.total_bytes,
                "evicted": self.evicted, "expired": self.expired}

    def _drop(self, session: Session, reason: str | None) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        self._locks.pop(session.id, None)
        self.total_bytes -= session.nbytes
        session.nbytes = 0
        session.images.clear()
        session.by_key.clear()
        session.texts = {}
        session.text_lengths.clear()
        session.calls.clear()
        if reason:
            self._gone[session.id] = reason
            while len(self._gone) > self._tombstone_limit:
                self._gone.popitem(last=False)
