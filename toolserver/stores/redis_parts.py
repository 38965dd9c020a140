"""Pieces of the Redis session store: its Lua scripts (every write checks, in one step, that the session
still exists and fits its byte budget), the replica's cache of decoded images, and texts read on demand."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import redis
from cachetools import LRUCache
from PIL import Image

from toolserver.allocator import give_back_freed_memory
from toolserver.errors import BadRequest, SessionGone, Unavailable
from toolserver.imaging import archive_preview
from toolserver.memorymap import Blob, DerivedPixels, HeldPixels, ImageEntry, SessionMap, image_nbytes
from toolserver.stores.node_pixels import NodePixels

log = logging.getLogger("toolserver.redis")
TRIM_AFTER_BYTES = 16 << 20  # a node worker's load of an image at least this large gives back malloc's freed pages

# KEYS: meta images blobs texts textlen gone calls outcomes. ARGV: tombstone_ms, reason, first_new.
# Touch: restart every key's idle timer and return the state (the image records from `first_new` on: the reader
# has the earlier ones, which never change); or why the session is gone.
_TOUCH = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  local reason = redis.call('GET', KEYS[6])
  if reason then return {0, reason} end
  return {0}
end
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl_ms'))
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
local ntexts = tonumber(redis.call('HGET', KEYS[1], 'ntexts') or '0')
if redis.call('LLEN', KEYS[2]) ~= count or (count > 0 and redis.call('EXISTS', KEYS[3]) == 0)
   or (ntexts > 0 and redis.call('EXISTS', KEYS[4]) == 0) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[7], KEYS[8])
  redis.call('SET', KEYS[6], ARGV[2], 'PX', tonumber(ARGV[1]))
  return {0, ARGV[2]}
end
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
redis.call('PEXPIRE', KEYS[7], ttl)
redis.call('PEXPIRE', KEYS[8], ttl)
redis.call('SET', KEYS[6], 'expired (idle longer than its ttl)', 'PX', ttl + tonumber(ARGV[1]))
return {1, redis.call('HGETALL', KEYS[1]), redis.call('LRANGE', KEYS[2], first_new, -1),
        redis.call('HGETALL', KEYS[5])}
"""
SCRIPT_TOUCH = "local first_new = tonumber(ARGV[3] or '0')\n" + _TOUCH

# KEYS: the touch's, then lock. ARGV: tombstone_ms, reason, token, lease_ms, first_new. A call's first round trip:
# the session's lock taken (SET NX PX) and, only if it was, the session touched and read; {-1} when another call
# holds it. A session found gone frees the lock at once.
SCRIPT_TAKE_AND_TOUCH = """
if not redis.call('SET', KEYS[9], ARGV[3], 'NX', 'PX', tonumber(ARGV[4])) then return {-1} end
local first_new = tonumber(ARGV[5] or '0')
local function touch()
""" + _TOUCH + """
end
local reply = touch()
if reply[1] == 0 then redis.call('DEL', KEYS[9]) end
return reply
"""

# KEYS: meta images blobs. ARGV: max_bytes, add_bytes, observations, n, n records, then blob field/value pairs.
SCRIPT_ADD_IMAGES = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local held = tonumber(redis.call('HGET', KEYS[1], 'nbytes') or '0')
local add = tonumber(ARGV[2])
if held + add > tonumber(ARGV[1]) then return {-2, held} end
local n = tonumber(ARGV[4])
local first = redis.call('LLEN', KEYS[2])
for i = 1, n do redis.call('RPUSH', KEYS[2], ARGV[4 + i]) end
for i = 5 + n, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('HINCRBY', KEYS[1], 'nbytes', add)
redis.call('HINCRBY', KEYS[1], 'count', n)
redis.call('HINCRBY', KEYS[1], 'observations', tonumber(ARGV[3]))
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl_ms'))
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return {first, held + add}
"""

# KEYS: meta texts textlen. ARGV: max_bytes, then key/text/length triples. A named text replaces its key.
SCRIPT_ADD_TEXTS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local held = tonumber(redis.call('HGET', KEYS[1], 'nbytes') or '0')
local add = 0
for i = 2, #ARGV, 3 do add = add + string.len(ARGV[i + 1]) - redis.call('HSTRLEN', KEYS[2], ARGV[i]) end
if held + add > tonumber(ARGV[1]) then return {-2, held} end
for i = 2, #ARGV, 3 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 2])
end
redis.call('HINCRBY', KEYS[1], 'nbytes', add)
redis.call('HSET', KEYS[1], 'ntexts', redis.call('HLEN', KEYS[2]))
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl_ms'))
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return {0, held + add}
"""

# KEYS: meta images blobs calls outcomes lock. ARGV: max_bytes, add_bytes, n, counted, fence, log_keep, record,
# outcome ('' for none), outcomes_keep, release ('1': the lock is deleted with this last write), then n image
# records, then blob field/value pairs.
# A tool call's whole effect at once, and only while the call still holds the session's lock (the fence): its
# images, its count, its log record (the oldest beyond log_keep dropped, and one the budget cannot hold: the log
# never fails a call; both counted) and its outcome (the latest outcomes_keep kept). Returns
# {first image index, bytes held, tool calls}, or {-1} (session gone), {-2, held} (over budget), {-3} (fence).
SCRIPT_COMMIT_CALL = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0, 0} end
if redis.call('GET', KEYS[6]) ~= ARGV[5] then return {-3, 0, 0} end
local max = tonumber(ARGV[1])
local held = tonumber(redis.call('HGET', KEYS[1], 'nbytes') or '0')
local add = tonumber(ARGV[2])
if held + add > max then return {-2, held, 0} end
local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl_ms'))
local n = tonumber(ARGV[3])
local first = redis.call('LLEN', KEYS[2])
if n > 0 then
  for i = 1, n do redis.call('RPUSH', KEYS[2], ARGV[10 + i]) end
  for i = 11 + n, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
  redis.call('HINCRBY', KEYS[1], 'count', n)
  redis.call('HINCRBY', KEYS[1], 'observations', n)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
held = held + add
local calls = tonumber(redis.call('HGET', KEYS[1], 'tool_calls') or '0')
if ARGV[4] == '1' then calls = redis.call('HINCRBY', KEYS[1], 'tool_calls', 1) end
local dropped = 0
while redis.call('LLEN', KEYS[4]) >= tonumber(ARGV[6]) do
  held = held - string.len(redis.call('LPOP', KEYS[4]))
  dropped = dropped + 1
end
if held + string.len(ARGV[7]) <= max then
  redis.call('RPUSH', KEYS[4], ARGV[7])
  held = held + string.len(ARGV[7])
  redis.call('PEXPIRE', KEYS[4], ttl)
else
  dropped = dropped + 1
end
if dropped > 0 then redis.call('HINCRBY', KEYS[1], 'calls_dropped', dropped) end
if ARGV[8] ~= '' then
  redis.call('RPUSH', KEYS[5], ARGV[8])
  redis.call('LTRIM', KEYS[5], -tonumber(ARGV[9]), -1)
  redis.call('PEXPIRE', KEYS[5], ttl)
end
redis.call('HSET', KEYS[1], 'nbytes', held)
if ARGV[10] == '1' then redis.call('DEL', KEYS[6]) end
return {first, held, calls}
"""

# KEYS: meta blobs. ARGV: max_bytes, field, value. Keeps an encoding if the budget allows.
SCRIPT_KEEP_ENCODING = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local held = tonumber(redis.call('HGET', KEYS[1], 'nbytes') or '0')
if held + string.len(ARGV[3]) > tonumber(ARGV[1]) then return 0 end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'nbytes', string.len(ARGV[3]))
end
return 1
"""

HELD = "held"  # an image record's stored form when its pixels are held by the node (`NodePixels.hold`), not in Redis
DERIVED = "derived"  # ... when the record is its recipe (`DerivedPixels`): remade from another image of the session


def image_records(session: SessionMap, entries: list[ImageEntry],
                  blobs: Sequence[Blob]) -> tuple[list[str], list[Any], int]:
    """The image records, blob field/value pairs and their bytes that adding `entries` writes. Held pixels
    (`HeldPixels`) are written already: only their name goes into the record, and their bytes are charged; a
    recipe (`DerivedPixels`) goes into the record (`p` its source's key, `x` the box, `z` the size, `n` its depth),
    and its pixel bytes are charged as a held image's are."""
    taken = set(session.by_key)
    records, pairs, nbytes = [], [], 0
    for i, entry in enumerate(entries):
        recipe: dict[str, Any] = {}
        if entry.key in taken:
            raise BadRequest(f"image key {entry.key!r} already exists in this session", code="duplicate_key")
        taken.add(entry.key)
        data = blobs[i] if i < len(blobs) else None
        if entry.alias_of is not None:
            source = session.by_key.get(entry.alias_of) or next(e for e in entries if e.key == entry.alias_of)
            entry.blob_key, entry.blob_format, entry.depth = source.blob_key, source.blob_format, source.depth
            recipe = {"n": source.depth} if source.depth else {}
        elif isinstance(data, HeldPixels):
            entry.blob_key, entry.blob_format = data.name, HELD
            nbytes += data.nbytes
        elif isinstance(data, DerivedPixels):
            entry.blob_key, entry.blob_format, entry.depth = entry.key, DERIVED, data.depth
            recipe = {"p": data.source, "x": list(data.box), "z": list(data.size) if data.size else None,
                      "n": data.depth}
            nbytes += data.nbytes
        else:
            if data is None:
                raise ValueError(f"image {entry.key} needs its bytes to be stored")
            entry.blob_key = entry.key
            entry.blob_format = "source" if entry.is_input else entry.pixels_format
            if not entry.is_input and entry.delivered is not None and data == entry.delivered[1]:
                entry.blob_format = entry.delivered[0]  # the system's own bytes decode to the pixels: kept once
            pairs += [entry.key, data]
            nbytes += len(data)
        if entry.delivered is not None and entry.blob_format != entry.delivered[0]:  # for a replay or a fetch
            pairs += [f"{entry.blob_key}.{entry.delivered[0]}", entry.delivered[1]]
            nbytes += len(entry.delivered[1])
        records.append(json.dumps({
            "k": entry.key, "o": entry.origin, "w": entry.size[0], "h": entry.size[1], "c": entry.content,
            "v": list(entry.view_size) if entry.view_size else None, "ve": entry.view_error,
            "m": entry.source_mime, "a": entry.alias_of, "b": entry.blob_key, "s": entry.blob_format, **recipe,
        }))
    return records, pairs, nbytes


def pixels_key(session_id: str, blob: str, content: str | None) -> tuple[str, str]:
    """The decoded-cache key of an image's pixels: an input with a content digest (its bytes and alpha rule) under
    that digest, so every session of this replica that uploaded the same bytes shares one decode and one copy (a
    GRPO group's rollouts reach any replica); anything else under its session and blob."""
    return (f"content:{content}", "") if content else (session_id, blob)


class DecodedCache:
    """Decoded images of this replica, least recently used dropped first, bounded by pixel bytes.

    Shared by the tool threads; a miss decodes outside the lock (two threads may both decode the
    same image once; the pixels are identical).
    """

    def __init__(self, max_bytes: int, node: NodePixels | None = None):
        self._cache: LRUCache = LRUCache(maxsize=max(1, max_bytes), getsizeof=image_nbytes)
        self._lock = threading.Lock()
        self.node = node  # the node's copy, shared by its server processes (`toolserver serve --workers N`)
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[str, str], load: Callable[[], Image.Image], *, node: bool = True,
            pool: str = "d") -> Image.Image:
        """The cached image, else `load()`'s, kept. `node=False`: an image the node holds already (`hold`), which
        its cache neither looks up nor copies. One shared by content (an upload, a view of it) is loaded by one
        process of the node at a time (`NodePixels.single_flight`): a GRPO step's first calls decode it once."""
        if (image := self.peek(key, node=node)) is not None:
            return image
        if not (node and self.node is not None and key[0].startswith("content:")):
            return self._trimmed(self._load(key, load, node=node))
        with self.node.single_flight(key, pool):
            if (found := self.peek(key)) is not None:  # made by another process while this one waited
                return found
            image = self._load(key, load)
        return self._trimmed(image)  # the waiting processes need not wait for the trim too

    def _load(self, key: tuple[str, str], load: Callable[[], Image.Image], *, node: bool = True) -> Image.Image:
        with self._lock:
            self.misses += 1
        return self.put(key, load(), node=node)

    def _trimmed(self, image: Image.Image) -> Image.Image:
        if self.node is not None and image_nbytes(image) >= TRIM_AFTER_BYTES:  # a photograph decoded, a view made:
            give_back_freed_memory()  # what it took in passing goes back now, not at the next sweep (allocator.py)
        return image

    def peek(self, key: tuple[str, str], *, node: bool = True, count: bool = True) -> Image.Image | None:
        """A cached image (a hit where `count`) or None; nothing is decoded (the node's copy may be read)."""
        with self._lock:
            image = self._cache.get(key)
            if image is not None:
                self.hits += count
                return image
        if not node or self.node is None or (image := self.node.get(key)) is None:
            return None
        with self._lock, contextlib.suppress(ValueError):  # larger than the whole cache: not kept
            self._cache[key] = image
        return image

    def put(self, key: tuple[str, str], image: Image.Image, *, node: bool = True) -> Image.Image:
        """Keep `image`; the copy kept: the node's mapping of it where the node keeps it so (one copy a node)."""
        if node and self.node is not None:
            self.node.put(key, image)
            image = self.node.mapping(key) or image
        with self._lock, contextlib.suppress(ValueError):
            self._cache[key] = image
        return image

    def drop_session(self, session_id: str) -> None:
        with self._lock:
            for key in [k for k in self._cache if k[0] == session_id]:
                del self._cache[key]
        if self.node is not None:
            self.node.drop_session(session_id)

    @property
    def nbytes(self) -> int:
        return int(self._cache.currsize)

    def __len__(self) -> int:
        return len(self._cache)


class RemoteTexts(Mapping[str, str]):
    """A session's texts, read from Redis when a tool asks for one (texts can be megabytes)."""

    def __init__(self, keys: Sequence[str], fetch: Callable[[str], str | None]):
        self._keys = list(keys)
        self._fetch = fetch

    def __getitem__(self, key: str) -> str:
        if key not in self._keys:
            raise KeyError(key)
        text = self._fetch(key)
        if text is None:
            raise SessionGone("the session's texts are gone from the session store; create a new session")
        return text

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def copy(self) -> RemoteTexts:
        """Itself: a remote view reads each text when asked, so a call never sees a half-added text."""
        return self


def wait_for_redis(url: str, timeout_s: float = 10.0) -> None:
    """Block until Redis answers PING (start-up scripts and tests)."""
    deadline = time.monotonic() + timeout_s
    with redis.Redis.from_url(url, socket_connect_timeout=0.5) as client:
        while True:
            try:
                client.ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def as_bytes(value: bytes | str) -> bytes:
    """A reply as bytes (the clients are not set to decode responses; the stubs allow either)."""
    return value if isinstance(value, bytes) else value.encode()


def pairs(flat: list[bytes]) -> dict[bytes, bytes]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


@contextlib.contextmanager
def redis_guard(retry_after_s: int) -> Iterator[None]:
    """Redis outages as 503 with Retry-After (`Unavailable`); the caller can simply retry."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError) as exc:
        log.warning("session store unreachable: %s", type(exc).__name__)
        raise Unavailable("the session store (Redis) is unreachable; retry shortly",
                          retry_after_s=retry_after_s, code="session_store_unavailable") from None
    except redis.ResponseError as exc:
        if str(exc).startswith("OOM"):
            raise Unavailable("the session store (Redis) is out of memory; retry later or release sessions",
                              retry_after_s=retry_after_s, code="session_store_full") from None
        raise


ARCHIVED_IMAGES = 200  # the most images of a released session read for the archive's thumbnails


async def hand_over(store: Any, session_id: str) -> None:
    """A released session, to whoever listens for ended sessions (the trajectory archive), before its keys are
    deleted: its call log, and its first images' pixels read now (later they could not be). Never fails a release.
    Sessions that Redis expires by itself are not seen ending."""
    if store.ended is None:
        return
    try:
        session = await store.get(session_id)
        records, dropped = await store.call_log(session)
        await asyncio.to_thread(_previews, session.images[:ARCHIVED_IMAGES])
        store.ended(session, None, records, dropped)  # None: released (the contract's `SessionEnded`)
    except Exception:  # a listener's bug, an image that cannot be read: the release goes on
        log.exception("session %s: its end was not recorded", session_id)


def _previews(entries: list[ImageEntry]) -> None:
    """The archive's small copy of each image, made now, each image's pixels read past the caches and let go: read
    through them, a node's worker copied every image of the session into the node's memory just before the release
    removed it (up to 888 MB of tmpfs at once on the race workload), and the entries held their pixels until the
    archive's writer came to them. What the decodes took goes back at once (`allocator`). An image that cannot be
    read has no thumbnail (the writer says so)."""
    for entry in entries:
        try:
            entry.preview = archive_preview(entry.pixels_once())
        except Exception as exc:  # a gone blob: the writer tries its pixels, fails and logs it
            log.debug("no preview of %s: %s", entry.key, exc)
    if entries:
        give_back_freed_memory()
