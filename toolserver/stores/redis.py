"""Sessions in Redis, shared by several replicas behind a load balancer.

Each session is a handful of keys sharing one hash tag (`ts:{<id>}:…`, so a Redis Cluster keeps them
on one slot), all expiring together after the session's idle TTL:

    meta     hash: settings (JSON), ttl_ms, observations, tool_calls, nbytes, count
    images   list: one JSON record per image, in index order
    blobs    hash: image key → its bytes, stored once: inputs as uploaded, tool images as PNG (lossless,
             so later crops see exactly the same pixels); `<key>.<fmt>` holds other encodings served
    texts    hash: text key → text;  textlen  hash: text key → length in characters
    gone     string: why the session is gone, kept a day past its expiry to answer 410 instead of 404
    calls    list: the call log (JSON records);  outcomes  list: the latest calls' outcomes, by idempotency key
    lock     a short lease, renewed while held: one tool call or addition at a time per session, across
             replicas; its token fences each call's commit (`redis_lock`)

Decoded images are cached per replica (`DecodedCache`, LRU by pixel bytes), so a rollout's repeated calls on one
image decode it once per replica (once per node where its processes share them, `node_pixels`; a node's own store
keeps tool images there as raw pixels, not in `blobs`: `redis_node`). Every write is a Lua script that first checks
the session still exists and its byte budget, so a released or expired session is never half-recreated.

Redis unreachable means 503 `session_store_unavailable` with Retry-After; the client reconnects by
itself on a later call once Redis is back.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis
import redis.asyncio as aredis
from cachetools import LRUCache
from PIL import Image
from redis.backoff import NoBackoff
from redis.retry import Retry

from toolserver.errors import NotFound, SessionGone, TooLarge, Unavailable
from toolserver.imaging import decode_image
from toolserver.memorymap import (
    OUTCOMES_KEPT,
    Blob,
    CallCommit,
    ImageEntry,
    RecordedOutcome,
    SessionMap,
)
from toolserver.models import SessionSettings
from toolserver.ownership import caller, may_see
from toolserver.stores.aliases import RedisAliases
from toolserver.stores.contract import CALL_LOG_LIMIT, SessionStore, SessionSummary, StoreGauge
from toolserver.stores.node_pixels import NodePixels
from toolserver.stores.redis_lock import Hold, SessionLocks
from toolserver.stores.redis_node import NodeHeldImages
from toolserver.stores.redis_parts import (
    DERIVED,
    HELD,
    SCRIPT_ADD_IMAGES,
    SCRIPT_ADD_TEXTS,
    SCRIPT_COMMIT_CALL,
    SCRIPT_KEEP_ENCODING,
    SCRIPT_TAKE_AND_TOUCH,
    SCRIPT_TOUCH,
    DecodedCache,
    RemoteTexts,
    as_bytes,
    hand_over,
    image_records,
    pixels_key,
    redis_guard,
)
from toolserver.stores.redis_records import RECORDS_CACHED, SessionRecords, scan_sessions

log = logging.getLogger("toolserver.redis")

TOMBSTONE_MS = 24 * 3600 * 1000
_EXPIRED = "expired (idle longer than its ttl)"
_EVICTED = "been evicted by the session store (Redis maxmemory)"


def _view_key(session_id: str, entry: ImageEntry, rule: str) -> tuple[str, str]:
    """A view's key in the decoded cache: an input's by its content (every session of the node that uploaded the
    same bytes shares it, as one process's sessions do), anything else's by its session and blob."""
    if entry.content:
        return f"content:{entry.content}|view:{rule}", ""
    return session_id, f"{entry.blob_key}|view:{rule}"


class RedisStore(SessionRecords, NodeHeldImages, SessionStore):
    kind = "redis"
    stores_encoded = True

    def __init__(self, url: str, *, session_max_bytes: int, decoded_cache_bytes: int, lock_timeout_s: float,
                 lock_lease_s: float = 3.0, timeout_s: float = 2.0, prefix: str = "ts", retry_after_s: int = 1,
                 node_pixels: NodePixels | None = None, holds_images: bool = False):
        options: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                                   "retry": Retry(NoBackoff(), 1), "health_check_interval": 30}
        self.url = url
        self.redis = aredis.Redis.from_url(url, **options)
        self._sync = redis.Redis.from_url(url, **options)  # for the tool threads' image loads
        self.session_max_bytes = session_max_bytes
        self.cache = DecodedCache(decoded_cache_bytes, node_pixels)
        # The node's own store (`serve --workers N` with its private Redis): tool images held as raw pixels in the
        # node's shared memory, Redis keeping their records. Never for a Redis that several nodes share.
        self.holds_images = holds_images and node_pixels is not None
        self.locks = SessionLocks(self.redis, lease_s=lock_lease_s, wait_s=lock_timeout_s)
        self.aliases = RedisAliases(self.redis, prefix, self._guard)
        self.prefix = prefix
        self.retry_after_s = retry_after_s
        self._touch = self.redis.register_script(SCRIPT_TOUCH)
        self._take = self.redis.register_script(SCRIPT_TAKE_AND_TOUCH)
        # Each session's image records as this process last read them (they are only ever appended): a read fetches
        # the new ones alone, so a call does not parse every earlier image's record again.
        self._records: LRUCache[str, list[dict[str, Any]]] = LRUCache(maxsize=RECORDS_CACHED)
        self._holds: dict[str, Hold] = {}  # this process's held session locks, by token (a commit may release one)
        self._add_images = self.redis.register_script(SCRIPT_ADD_IMAGES)
        self._add_texts = self.redis.register_script(SCRIPT_ADD_TEXTS)
        self._keep = self.redis.register_script(SCRIPT_KEEP_ENCODING)
        self._commit = self.redis.register_script(SCRIPT_COMMIT_CALL)

    # -- keys -----------------------------------------------------------------------------------
    def _key(self, session_id: str, part: str) -> str:
        return f"{self.prefix}:{{{session_id}}}:{part}"

    def _keys(self, session_id: str) -> list[str]:
        return [self._key(session_id, p)
                for p in ("meta", "images", "blobs", "texts", "textlen", "gone", "calls", "outcomes")]

    # -- errors ---------------------------------------------------------------------------------
    def _guard(self) -> contextlib.AbstractContextManager[None]:
        """Redis outages as 503 with Retry-After; the caller can simply retry."""
        return redis_guard(self.retry_after_s)

    # -- sessions -------------------------------------------------------------------------------
    async def create(self, settings: SessionSettings, ttl_s: float) -> SessionMap:
        assert settings.view is not None
        session_id = secrets.token_urlsafe(24)
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        meta = {"settings": settings.model_dump_json(), "ttl_ms": ttl_ms, "observations": 0, "tool_calls": 0,
                "nbytes": 0, "count": 0, "ntexts": 0, "created_ms": int(time.time() * 1000),
                "profile": settings.profile, "owner": caller.get() or ""}
        keys = self._keys(session_id)
        with self._guard():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(keys[0], mapping=meta)  # type: ignore[arg-type]  # redis-py's stubs: any scalar
                pipe.pexpire(keys[0], ttl_ms)
                pipe.set(keys[5], _EXPIRED, px=ttl_ms + TOMBSTONE_MS)
                await pipe.execute()
        session = SessionMap(session_id, settings, settings.view.rule(), ttl_s,
                             texts=RemoteTexts([], self._text_fetcher(session_id)))
        session.owner = caller.get()
        return session

    async def get(self, session_id: str) -> SessionMap:
        if not session_id or len(session_id) > 256:
            raise NotFound(f"no session {session_id}", code="unknown_session")
        with self._guard():
            known = self._known(session_id)
            reply = await self._touch(keys=self._keys(session_id), args=[TOMBSTONE_MS, _EVICTED, len(known)])
        return self._session(session_id, reply, known)

    @asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[SessionMap]:
        if not session_id or len(session_id) > 256:
            raise NotFound(f"no session {session_id}", code="unknown_session")
        keys = [*self._keys(session_id), self._key(session_id, "lock")]
        lease_ms = max(1, int(self.locks.lease_s * 1000))

        known = self._known(session_id)

        async def take(token: str) -> tuple[bool, Any]:  # the lock and the session in one round trip
            reply = await self._take(keys=keys, args=[TOMBSTONE_MS, _EVICTED, token, lease_ms, len(known)])
            return reply[0] != -1, reply

        with self._guard():
            async with self.locks.hold(keys[-1], session_id, take) as holding:
                if holding is None:
                    raise Unavailable("another call of this session holds it too long; retry shortly",
                                      retry_after_s=self.retry_after_s, code="session_busy")
                session = self._session(session_id, holding.found, known)  # as the previous holder left it
                session.fence = holding.token
                self._holds[holding.token] = holding
                try:
                    yield session
                finally:
                    self._holds.pop(holding.token, None)

    def mutating(self, session_id: str) -> contextlib.AbstractAsyncContextManager[SessionMap]:
        return self.exclusive(session_id)  # image and text keys are assigned from the current state

    async def release(self, session_id: str) -> None:
        keys = self._keys(session_id)
        with self._guard():
            live, owner = await self.redis.exists(keys[0]), await self.redis.hget(keys[0], "owner")
        if not live:
            await self.get(session_id)  # 404 or 410, as for any other use
        if not may_see(as_bytes(owner).decode() if owner else None):
            raise NotFound(f"no session {session_id}", code="unknown_session")
        await hand_over(self, session_id)  # to the archive, before its keys go
        with self._guard():
            await self.redis.delete(*keys)  # the tombstone too: a released session is unknown (404)
        self.cache.drop_session(session_id)
        self._records.pop(session_id, None)

    async def holds(self, session_id: str) -> bool:
        with self._guard():
            return bool(await self.redis.exists(self._key(session_id, "meta")))

    # -- additions ------------------------------------------------------------------------------
    async def add_images(self, session: SessionMap, entries: list[ImageEntry],
                         blobs: Sequence[Blob] = (), *, observations: int = 0) -> None:
        records, pairs, nbytes = image_records(session, entries, blobs)
        keys = self._keys(session.id)[:3]
        with self._guard():
            args: list[Any] = [self.session_max_bytes, nbytes, observations, len(records), *records, *pairs]
            first, held = await self._add_images(keys=keys, args=args)
        self._check_write(session, first, held, nbytes)
        self._added(session, entries, held, observations)

    def _added(self, session: SessionMap, entries: list[ImageEntry], held: int, observations: int) -> None:
        for entry in entries:
            session.append_image(entry)
            if entry.alias_of is None and entry.decoded:  # decoded here already: later calls need not
                own = entry.blob_format in (HELD, DERIVED)  # in the node's memory already, or remade: not copied there
                key = (session.id, entry.blob_key or "") if own else pixels_key(session.id, entry.key, entry.content)
                self.cache.put(key, entry.pixels, node=not own)
        session.observations += observations
        session.nbytes = held

    async def add_texts(self, session: SessionMap, texts: list[tuple[str, str]]) -> None:
        args: list[Any] = [self.session_max_bytes]
        for key, text in texts:
            args += [key, text, len(text)]
        keys = self._keys(session.id)
        with self._guard():
            status, held = await self._add_texts(keys=[keys[0], keys[3], keys[4]], args=args)
        self._check_write(session, status, held, sum(len(t.encode()) for _, t in texts))
        for key, text in texts:
            session.text_lengths[key] = len(text)
        session.texts = RemoteTexts(list(session.text_lengths), self._text_fetcher(session.id))
        session.nbytes = held

    def _check_write(self, session: SessionMap, status: int, held: int, nbytes: int) -> None:
        if status == -1:
            raise SessionGone(f"session {session.id} ended while it was being changed; create a new session")
        if status == -2:
            raise TooLarge(f"session would hold {held + nbytes} bytes, over its {self.session_max_bytes}-byte "
                           "budget; release images or start a new session")

    # -- tool calls -----------------------------------------------------------------------------
    async def commit_call(self, session: SessionMap, commit: CallCommit) -> None:
        records, pairs, nbytes = image_records(session, commit.entries, commit.blobs)
        outcome = "" if commit.outcome is None else json.dumps(
            {"k": commit.outcome.key, "f": commit.outcome.fingerprint, "r": commit.outcome.result})
        keys = [*self._keys(session.id)[:3], *(self._key(session.id, p) for p in ("calls", "outcomes", "lock"))]
        holding = self._holds.get(session.fence or "")  # the call's last write: its lock goes with it
        args: list[Any] = [self.session_max_bytes, nbytes, len(records), int(commit.counted), session.fence or "",
                           CALL_LOG_LIMIT, commit.record, outcome, OUTCOMES_KEPT, "1" if holding else "0",
                           *records, *pairs]
        try:
            first, held, calls = await self._commit(keys=keys, args=args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Sent, perhaps run: only a retry with the same idempotency key can tell (the fence keeps a late
            # write from landing once the retry holds the lock).
            log.warning("session %s: a call's commit is unconfirmed (%s)", session.id, type(exc).__name__)
            raise Unavailable("the session store did not confirm this call's result; retry it with the same "
                              "idempotency key to get the result it recorded, if any",
                              retry_after_s=self.retry_after_s, code="outcome_unknown") from None
        if first == -3:
            raise Unavailable("this call's hold on its session lapsed during a session-store stall, so nothing was "
                              "recorded; retry", retry_after_s=self.retry_after_s, code="session_lock_lost")
        self._check_write(session, first, held, nbytes)
        if holding is not None:
            holding.released = True
        self._added(session, commit.entries, held, len(commit.entries))
        session.tool_calls = int(calls)

    async def recorded_outcome(self, session: SessionMap, key: str) -> RecordedOutcome | None:
        with self._guard():
            found = await self.redis.lrange(self._key(session.id, "outcomes"), 0, -1)
        for raw in reversed(found):
            record = json.loads(raw)
            if record["k"] == key:
                return RecordedOutcome(record["k"], record["f"], record["r"])
        return None

    # -- the call log -------------------------------------------------------------------------------
    async def call_log(self, session: SessionMap) -> tuple[list[str], int]:
        with self._guard():
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.lrange(self._key(session.id, "calls"), 0, -1)
                pipe.hget(self._key(session.id, "meta"), "calls_dropped")
                records, dropped = await pipe.execute()
        return [r.decode() for r in records], int(dropped or 0)

    async def list_sessions(self, offset: int, limit: int) -> tuple[list[SessionSummary], int]:
        """Every replica's sessions the caller may see: a SCAN over the meta keys."""
        with self._guard():
            return await scan_sessions(self.redis, self.prefix, offset, limit)

    # -- encodings ------------------------------------------------------------------------------
    async def cached_encoding(self, session: SessionMap, entry: ImageEntry, fmt: str) -> bytes | None:
        field = entry.blob_key if entry.blob_format == fmt else f"{entry.blob_key}.{fmt}"
        with self._guard():
            found = await self.redis.hget(self._key(session.id, "blobs"), field or "")
        return as_bytes(found) if found is not None else None

    async def keep_encoding(self, session: SessionMap, entry: ImageEntry, fmt: str, data: bytes) -> None:
        with self._guard():
            await self._keep(keys=[self._key(session.id, "meta"), self._key(session.id, "blobs")],
                             args=[self.session_max_bytes, f"{entry.blob_key}.{fmt}", data])

    def view_lookup(self, session: SessionMap) -> Callable[[ImageEntry, str], Image.Image | None]:
        # Views live in this replica's decoded cache beside the pixels they come from, and in a node's pixels
        # (never in Redis: a resize is cheaper to redo than to ship); an alias shares its source's blob, so its
        # views too.
        return lambda entry, rule: self.cache.peek(_view_key(session.id, entry, rule))

    def view_maker(self, session: SessionMap) -> Callable[[ImageEntry, str, Callable[[], Image.Image]], Image.Image]:
        # In a node, an input's view is made by one worker while the others wait for it (`DecodedCache.get`):
        # a 13 MP photograph's view for Pixel-Reasoner (a bicubic resize and a JPEG round trip) is ~150 MB
        # of memory and ~0.3 s of CPU while it is made, and a GRPO step's first calls reach every worker at once.
        return lambda entry, rule, make: self.cache.get(_view_key(session.id, entry, rule), make, pool="v")

    async def keep_views(self, session: SessionMap, views: Sequence[tuple[ImageEntry, str, Image.Image]]) -> None:
        for entry, rule, image in views:
            self.cache.put(_view_key(session.id, entry, rule), image)

    async def read_source(self, session: SessionMap, entry: ImageEntry) -> bytes:
        with self._guard():
            data = await self.redis.hget(self._key(session.id, "blobs"), entry.blob_key or "")
        if data is None:
            raise SessionGone(f"session {session.id} has {_EVICTED}; create a new session")
        return as_bytes(data)

    # -- tool threads ---------------------------------------------------------------------------
    def _fetch(self, session_id: str, field: str) -> bytes:
        with self._guard():
            data = self._sync.hget(self._key(session_id, "blobs"), field)
        if data is None:
            raise SessionGone(f"session {session_id} has {_EVICTED}; create a new session")
        return data  # type: ignore[return-value]

    def _decode(self, session_id: str, field: str) -> Image.Image:
        data = self._fetch(session_id, field)  # checked against the limits when it was added
        return decode_image(data, max_bytes=len(data), max_pixels=1 << 62).pixels

    def _text_fetcher(self, session_id: str) -> Callable[[str], str | None]:
        def fetch(key: str) -> str | None:
            with self._guard():
                data = self._sync.hget(self._key(session_id, "texts"), key)
            return None if data is None else data.decode()  # type: ignore[union-attr]
        return fetch

    # -- operations -----------------------------------------------------------------------------
    async def check(self) -> str | None:
        try:
            await asyncio.wait_for(self.redis.ping(), timeout=2.0)
        except (redis.RedisError, OSError, TimeoutError) as exc:
            return f"the session store (Redis) is unreachable: {type(exc).__name__}"
        return None

    def gauges(self) -> list[StoreGauge]:
        cache = self.cache
        return [StoreGauge("toolserver_decoded_cache_bytes", "Decoded images cached by this replica",
                           lambda: cache.nbytes)]

    def stats(self) -> dict[str, int | str]:
        node, cache = self.cache.node, self.cache
        return {"kind": self.kind, "decoded_cache_images": len(cache), "decoded_cache_bytes": cache.nbytes,
                "decoded_cache_hits": cache.hits, "decoded_cache_misses": cache.misses,
                **({} if node is None else {"node_pixels_hits": node.hits, "node_pixels_misses": node.misses})}

    async def close(self) -> None:
        await self.redis.aclose()
        self._sync.close()

