"""Sessions and their indexed memory map, and the in-memory store with TTL, byte budgets and LRU eviction.

A session is one trajectory. Its images are addressed by key or 0-based index; its texts by key.
All mutation happens on the event loop thread; tool threads only read images, which are immutable
once registered, so no locks are needed beyond the per-session call lock.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from PIL import Image

from toolserver.errors import BadRequest, NotFound, SessionGone, TooLarge
from toolserver.geometry import CoordError, ViewRule
from toolserver.models import ImageInfo, SessionSettings

INPUT_PREFIX = "original_image"
OBSERVATION_PREFIX = "observation_"
_INPUT_KEY = re.compile(rf"{INPUT_PREFIX}_\d+")


@dataclass(eq=False)
class ImageEntry:
    key: str
    index: int
    origin: str  # "input" or "tool:<name>"
    pixels: Image.Image  # RGB, never modified after registration
    view_size: tuple[int, int] | None
    view_error: str | None = None
    source_bytes: bytes | None = None  # what was uploaded (inputs only)
    source_mime: str | None = None
    alias_of: str | None = None  # lookback returns an earlier image: same pixels, new key
    encoded: dict[str, bytes] = field(default_factory=dict)  # output encodings, by format

    @property
    def size(self) -> tuple[int, int]:
        return self.pixels.size

    @property
    def nbytes(self) -> int:
        pixel_bytes = 0 if self.alias_of else self.pixels.width * self.pixels.height * 3
        return pixel_bytes + len(self.source_bytes or b"") + sum(len(b) for b in self.encoded.values())

    def info(self) -> ImageInfo:
        vw, vh = self.view_size if self.view_size else (None, None)
        return ImageInfo(key=self.key, index=self.index, width=self.size[0], height=self.size[1],
                         view_width=vw, view_height=vh, view_error=self.view_error, origin=self.origin)


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
    def __init__(self, session_id: str, settings: SessionSettings, view_rule: ViewRule, ttl_s: float):
        self.id = session_id
        self.settings = settings
        self.view_rule = view_rule
        self.ttl_s = ttl_s
        self.images: list[ImageEntry] = []
        self.by_key: dict[str, ImageEntry] = {}
        self.texts: dict[str, str] = {}
        self.observations = 0
        self.tool_calls = 0
        self.nbytes = 0
        self.last_used = time.monotonic()
        # One tool call at a time per session: observation numbering stays deterministic.
        self.lock = asyncio.Lock()

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

    def next_text_key(self) -> str:
        n = 0
        while f"text_{n}" in self.texts:
            n += 1
        return f"text_{n}"

    # -- lookup -------------------------------------------------------------------------------
    def resolve(self, ref: str | int) -> ImageEntry | None:
        return find_image(self.images, ref)

    @property
    def keys(self) -> list[str]:
        return [e.key for e in self.images]

    # -- mutation (event-loop thread only) ----------------------------------------------------
    def add_image(self, entry: ImageEntry) -> ImageEntry:
        if entry.key in self.by_key:
            raise BadRequest(f"image key {entry.key!r} already exists in this session", code="duplicate_key")
        entry.index = len(self.images)
        self.images.append(entry)
        self.by_key[entry.key] = entry
        return entry

    def expires_in(self, now: float | None = None) -> float:
        return max(0.0, self.last_used + self.ttl_s - (now if now is not None else time.monotonic()))


class SessionStore:
    """In-memory sessions: idle expiry, a byte budget per session and in total, LRU eviction.

    Written by hand rather than with cachetools: a session's size changes after insertion, each
    session has its own TTL, and ids that expired or were evicted must be remembered to answer 410.
    """

    def __init__(self, *, session_max_bytes: int, total_max_bytes: int, tombstones: int = 100_000):
        self.session_max_bytes = session_max_bytes
        self.total_max_bytes = total_max_bytes
        self._sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._tombstone_limit = tombstones
        self.total_bytes = 0
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, settings: SessionSettings, view_rule: ViewRule, ttl_s: float) -> Session:
        session = Session(secrets.token_urlsafe(24), settings, view_rule, ttl_s)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
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

    def is_live(self, session: Session) -> bool:
        return self._sessions.get(session.id) is session

    def release(self, session_id: str) -> None:
        session = self.get(session_id)
        self._drop(session, None)

    def charge(self, session: Session, nbytes: int) -> None:
        """Account for `nbytes` more held by `session`, evicting least-recently-used others if needed."""
        if session.nbytes + nbytes > self.session_max_bytes:
            raise TooLarge(
                f"session would hold {session.nbytes + nbytes} bytes, over its {self.session_max_bytes}-byte "
                "budget; release images or start a new session"
            )
        if nbytes > self.total_max_bytes:
            raise TooLarge(f"{nbytes} bytes is over the server's total budget of {self.total_max_bytes}")
        while self.total_bytes + nbytes > self.total_max_bytes:
            victim = next((s for s in self._sessions.values() if s is not session), None)
            if victim is None:
                raise TooLarge("the server's memory budget is exhausted")
            self._drop(victim, "been evicted under memory pressure (least recently used)")
            self.evicted += 1
        session.nbytes += nbytes
        self.total_bytes += nbytes

    def sweep(self) -> int:
        """Drop every expired session; returns how many."""
        now = time.monotonic()
        expired = [s for s in self._sessions.values() if s.expires_in(now) <= 0]
        for session in expired:
            self._drop(session, "expired (idle longer than its ttl)")
        self.expired += len(expired)
        return len(expired)

    def _drop(self, session: Session, reason: str | None) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        self.total_bytes -= session.nbytes
        session.nbytes = 0
        session.images.clear()
        session.by_key.clear()
        session.texts.clear()
        if reason:
            self._gone[session.id] = reason
            while len(self._gone) > self._tombstone_limit:
                self._gone.popitem(last=False)
