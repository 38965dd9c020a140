"""The in-memory session store: one process's sessions, with idle expiry (TTL), a byte budget per session and
in total, and LRU eviction. The default for one replica; several replicas share sessions through `stores.redis`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from PIL import Image

from toolserver.errors import BadRequest, NotFound, SessionGone, TooLarge
from toolserver.memorymap import Blob, CallCommit, ImageEntry, RecordedOutcome, SessionMap, image_nbytes
from toolserver.models import SessionSettings
from toolserver.ownership import caller, may_see
from toolserver.stores.aliases import Aliases
from toolserver.stores.contract import CALL_LOG_LIMIT, SessionStore, SessionSummary, StoreGauge


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
        self.aliases = Aliases()
        self._sessions: OrderedDict[str, SessionMap] = OrderedDict()  # least recently used first
        self._locks: dict[str, asyncio.Lock] = {}
        self._gone: OrderedDict[str, str] = OrderedDict()
        self._tombstone_limit = tombstones
        self.total_bytes = 0
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    async def create(self, settings: SessionSettings, ttl_s: float) -> SessionMap:
        assert settings.view is not None
        session = SessionMap(secrets.token_urlsafe(24), settings, settings.view.rule(), ttl_s, texts={})
        session.owner = caller.get()
        self._sessions[session.id] = session
        self._locks[session.id] = asyncio.Lock()
        return session

    async def get(self, session_id: str) -> SessionMap:
        return self._get(session_id)

    def _get(self, session_id: str) -> SessionMap:
        session = self._sessions.get(session_id)
        if session is not None and not may_see(session.owner):  # another key's session: as if none
            raise NotFound(f"no session {session_id}", code="unknown_session")
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
    async def exclusive(self, session_id: str) -> AsyncIterator[SessionMap]:
        session = self._get(session_id)
        async with self._locks[session.id]:
            yield session

    @asynccontextmanager
    async def mutating(self, session_id: str) -> AsyncIterator[SessionMap]:
        # Additions run on the event loop between awaits: they need no lock, and must not wait for a tool.
        yield self._get(session_id)

    async def release(self, session_id: str) -> None:
        self._drop(self._get(session_id), None)

    async def holds(self, session_id: str) -> bool:
        session = self._sessions.get(session_id)
        return session is not None and session.expires_in(time.monotonic()) > 0

    async def add_images(self, session: SessionMap, entries: list[ImageEntry],
                         blobs: Sequence[Blob] = (), *, observations: int = 0) -> None:
        taken = set(session.by_key)
        for entry in entries:
            if entry.key in taken:
                raise BadRequest(f"image key {entry.key!r} already exists in this session", code="duplicate_key")
            taken.add(entry.key)
        self._charge(session, sum(e.nbytes for e in entries))
        for entry in entries:
            session.append_image(entry)
        session.observations += observations

    async def add_texts(self, session: SessionMap, texts: list[tuple[str, str]]) -> None:
        replaced = sum(len(session.texts[k].encode()) for k in {k for k, _ in texts} if k in session.texts)
        self._charge(session, sum(len(t.encode()) for _, t in texts) - replaced)
        stored = session.texts
        assert isinstance(stored, dict)
        for key, text in texts:
            stored[key] = text
            session.text_lengths[key] = len(text)

    async def keep_encoding(self, session: SessionMap, entry: ImageEntry, fmt: str, data: bytes) -> None:
        if session.by_key.get(entry.key) is entry and self._fits(session, len(data)):  # still held, room left
            self._add_bytes(session, len(data), cache=True)
            entry.encoded[fmt] = data

    async def commit_call(self, session: SessionMap, commit: CallCommit) -> None:
        if self._sessions.get(session.id) is not session:
            raise SessionGone(f"session {session.id} ended while the call ran")
        if commit.entries:  # all or nothing: a budget refusal raises before anything changes
            await self.add_images(session, commit.entries, observations=len(commit.entries))
        if commit.counted:
            session.tool_calls += 1
        self._log(session, commit.record)
        if commit.outcome is not None:
            session.outcomes.append(commit.outcome)

    async def recorded_outcome(self, session: SessionMap, key: str) -> RecordedOutcome | None:
        return next((o for o in reversed(session.outcomes) if o.key == key), None)

    def _log(self, session: SessionMap, record: str) -> None:
        while len(session.calls) >= CALL_LOG_LIMIT:
            self._add_bytes(session, -len(session.calls.popleft()))
            session.calls_dropped += 1
        if self._fits(session, len(record)):
            session.calls.append(record)
            self._add_bytes(session, len(record))
        else:
            session.calls_dropped += 1

    async def call_log(self, session: SessionMap) -> tuple[list[str], int]:
        return list(session.calls), session.calls_dropped

    async def list_sessions(self, offset: int, limit: int) -> tuple[list[SessionSummary], int]:
        now = time.monotonic()
        live = sorted((s for s in self._sessions.values() if s.expires_in(now) > 0 and may_see(s.owner)),
                      key=lambda s: s.created)
        wall = time.time()
        page = [SessionSummary(s.id, s.settings.profile, len(s.images), s.tool_calls, wall - s.created)
                for s in live[offset:offset + limit]]
        return page, len(live)

    def view_lookup(self, session: SessionMap) -> Callable[[ImageEntry, str], Image.Image | None]:
        return lambda entry, rule: entry.views.get(rule)

    async def keep_views(self, session: SessionMap, views: Sequence[tuple[ImageEntry, str, Image.Image]]) -> None:
        for entry, rule, image in views:
            nbytes = image_nbytes(image)
            if session.by_key.get(entry.key) is entry and rule not in entry.views and self._fits(session, nbytes):
                self._add_bytes(session, nbytes, cache=True)
                entry.views[rule] = image

    async def cached_encoding(self, session: SessionMap, entry: ImageEntry, fmt: str) -> bytes | None:
        if entry.delivered is not None and entry.delivered[0] == fmt:
            return entry.delivered[1]
        return entry.encoded.get(fmt)

    async def read_source(self, session: SessionMap, entry: ImageEntry) -> bytes:
        assert entry.source_bytes is not None
        return entry.source_bytes

    def _fits(self, session: SessionMap, nbytes: int) -> bool:
        """Whether a cache of `nbytes` fits without shedding or evicting anything."""
        return (session.nbytes + nbytes <= self.session_max_bytes
                and self.total_bytes + nbytes <= self.total_max_bytes)

    def _add_bytes(self, session: SessionMap, nbytes: int, *, cache: bool = False) -> None:
        session.nbytes += nbytes
        self.total_bytes += nbytes
        if cache:
            session.cache_nbytes += nbytes

    def _shed_caches(self, sessions: Sequence[SessionMap], need: int) -> None:
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

    def _charge(self, session: SessionMap, nbytes: int) -> None:
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

    async def close(self) -> None:
        """Sessions still live when the server stops end here (their listener hears of them)."""
        for session in list(self._sessions.values()):
            self._drop(session, "stopped (the server stopped)")

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

    def gauges(self) -> list[StoreGauge]:
        return [StoreGauge("toolserver_sessions_live", "Live sessions", lambda: len(self)),
                StoreGauge("toolserver_bytes_held", "Bytes held by all sessions", lambda: self.total_bytes),
                StoreGauge("toolserver_sessions_evicted", "Sessions evicted (LRU)", lambda: self.evicted),
                StoreGauge("toolserver_sessions_expired", "Sessions expired (TTL)", lambda: self.expired)]

    def _drop(self, session: SessionMap, reason: str | None) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        if self.ended is not None:
            try:
                self.ended(session, reason, list(session.calls), session.calls_dropped)
            except Exception:  # a listener's bug must not keep a session's memory held
                logging.getLogger("toolserver").exception("session %s: its end was not recorded", session.id)
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
