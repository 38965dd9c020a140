"""How a Redis store's process reads a session from its records: the meta hash, the image records (each image's
JSON, in index order, only ever appended) and the text lengths that a touch script returns, as a `SessionMap` whose
entries load their pixels on first use.

Each process keeps the image records it has read of its latest sessions (`RECORDS_CACHED`), and its touches ask
only for the ones after them, so a call does not parse every earlier image's record again (docs/decisions.md,
issue #41). An entry's pixels come from the upload's bytes in Redis, from the node's memory (`held`), or are remade
from another image of the session (`derived`, a crop's recipe), always through the process's decoded cache. A part
of an image (a zoom's box) is cut from the process's cached pixels where it has them, else read from the node's
memory alone, without copying the whole image into the process (`ImageEntry.region`). The sessions a caller may
see are listed from their meta records (`scan_sessions`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache
from PIL import Image

from toolserver.errors import NotFound, SessionGone, Unavailable
from toolserver.memorymap import Derivation, ImageEntry, PixelBox, SessionMap
from toolserver.models import SessionSettings
from toolserver.ownership import may_see
from toolserver.stores.contract import SessionSummary
from toolserver.stores.redis_parts import DERIVED, HELD, DecodedCache, RemoteTexts, pairs, pixels_key

RECORDS_CACHED = 4096  # sessions whose image records a process keeps between their calls


class SessionRecords:
    """What the Redis store does to read a session (mixed into `RedisStore`)."""

    cache: DecodedCache
    retry_after_s: int
    _records: LRUCache[str, list[dict[str, Any]]]

    if TYPE_CHECKING:  # the store's own, and `NodeHeldImages`'s (declared only: a body here would shadow theirs)
        def _text_fetcher(self, session_id: str) -> Callable[[str], str | None]: ...
        def held_pixels(self, session_id: str, name: str) -> Image.Image: ...
        def _decode(self, session_id: str, field: str) -> Image.Image: ...
        def _fetch(self, session_id: str, field: str) -> bytes: ...

    def _known(self, session_id: str) -> list[dict[str, Any]]:
        """The image records this process has read of a session: a touch sends only the ones after them."""
        known = self._records.get(session_id)
        return known if known is not None else []

    def _session(self, session_id: str, reply: list[Any], known: list[dict[str, Any]]) -> SessionMap:
        """The session a touch read (SCRIPT_TOUCH's reply, its image records after the `known` ones), or 404 / 410."""
        if reply[0] == 0:
            self._records.pop(session_id, None)
            if len(reply) > 1:
                reason = reply[1].decode()
                raise SessionGone(f"session {session_id} has {reason}; create a new session")
            raise NotFound(f"no session {session_id}", code="unknown_session")
        meta = pairs(reply[1])
        records = known + [json.loads(raw) for raw in reply[2]]
        if len(records) != int(meta.get(b"count", 0)):  # never, as records are only appended: read it whole again
            self._records.pop(session_id, None)
            raise Unavailable("the session's image records changed while they were read; retry",
                              retry_after_s=self.retry_after_s, code="session_busy")
        if reply[2]:
            self._records[session_id] = records
        session = self._build(session_id, meta, records, pairs(reply[3]))
        if not may_see(session.owner):  # another key's session: as if none
            raise NotFound(f"no session {session_id}", code="unknown_session")
        return session

    def _build(self, session_id: str, meta: dict[bytes, bytes], records: list[dict[str, Any]],
               text_lengths: dict[bytes, bytes]) -> SessionMap:
        settings = SessionSettings.model_validate_json(meta[b"settings"])
        assert settings.view is not None
        lengths = {k.decode(): int(v) for k, v in text_lengths.items()}
        session = SessionMap(session_id, settings, settings.view.rule(), int(meta[b"ttl_ms"]) / 1000,
                          texts=RemoteTexts(list(lengths), self._text_fetcher(session_id)), text_lengths=lengths)
        session.observations = int(meta[b"observations"])
        session.tool_calls = int(meta[b"tool_calls"])
        session.nbytes = int(meta[b"nbytes"])
        session.owner = meta.get(b"owner", b"").decode() or None
        for rec in records:
            session.append_image(self._entry(session, rec))
        return session

    def _entry(self, session: SessionMap, rec: dict[str, Any]) -> ImageEntry:
        session_id, blob, kind = session.id, rec["b"], rec["s"]
        # Held by the node's memory (read from there, no decode, no second copy there) or remade from another image
        # of the session: cached under its session, never copied into the node's cache.
        own = kind in (HELD, DERIVED)
        key = (session_id, blob) if own else pixels_key(session_id, blob, rec.get("c"))
        source = session.by_key[rec["a"] if rec["a"] is not None else rec["p"]] if kind == DERIVED else None
        loader = _Loader(self, session_id, rec, key, own, source)
        entry = ImageEntry(key=rec["k"], index=-1, origin=rec["o"], size=(rec["w"], rec["h"]),
                           view_size=tuple(rec["v"]) if rec["v"] else None, view_error=rec["ve"],
                           source_mime=rec["m"], alias_of=rec["a"], content=rec.get("c"),
                           load_pixels=loader.pixels, load_region=loader.region, load_once=loader.once,
                           load_mode=loader.mode, load_source=loader.source_bytes if rec["o"] == "input" else None)
        entry.blob_key = blob
        entry.blob_format = kind
        entry.depth = rec.get("n", 0)
        return entry

    def decoded_input(self, content: str, decode: Callable[[], Image.Image]) -> Image.Image | None:
        """An upload's pixels by content: this process's cache, else the node's copy, else in a node `decode()`'s (by
        one process of the node at a time: a GRPO group's first uploads reach every worker at once), kept. A replica
        without a node leaves the decode to the intake, which registers what it decoded (not a miss here)."""
        key = pixels_key("", "", content)
        return self.cache.get(key, decode) if self.cache.node is not None else self.cache.peek(key)


class _Loader:
    """How one entry read from Redis gets its pixels, a part of them, and its upload's bytes. One object an entry
    (the map is built again from its records at every call: it was four closures and a `Derivation` an image).

    It holds the entry's source (an earlier entry: the image a recipe is cut from, or an alias's), never the session
    map: a map whose entries referred back to it would be a reference cycle, freed (with the pixels its entries
    loaded) only by a full collection, which the pixels' size never triggers."""

    __slots__ = ("key", "own", "rec", "session_id", "source", "store")

    def __init__(self, store: SessionRecords, session_id: str, rec: dict[str, Any], key: tuple[str, str], own: bool,
                 source: ImageEntry | None):
        self.store, self.session_id, self.rec, self.key, self.own, self.source = (
            store, session_id, rec, key, own, source)

    def pixels(self) -> Image.Image:
        """Through the process's decoded cache (an upload's also through the node's copy)."""
        return self.store.cache.get(self.key, self._make, node=not self.own)

    def once(self) -> Image.Image:
        """Past the caches, kept in none: this process's cached pixels, else the node's copy of an upload or a held
        image (a mapping, no copy), else made (decoded from Redis, cut from its source)."""
        cache, node = self.store.cache, self.store.cache.node
        found = cache.peek(self.key, node=False)
        if found is None and node is not None and self.rec["s"] != DERIVED:
            found = node.held(self.session_id, self.rec["b"]) if self.rec["s"] == HELD else node.get(self.key)
        return found if found is not None else self._make()

    def _make(self) -> Image.Image:
        rec, kind = self.rec, self.rec["s"]
        if kind == DERIVED:  # a recipe: remade from its source (an alias: its source's pixels)
            assert self.source is not None
            if rec["a"] is not None:
                return self.source.pixels
            return Derivation(self.source, tuple(rec["x"]), tuple(rec["z"]) if rec["z"] else None).cut()
        if kind == HELD:
            return self.store.held_pixels(self.session_id, rec["b"])
        return self.store._decode(self.session_id, rec["b"])

    def source_bytes(self) -> bytes:
        return self.store._fetch(self.session_id, self.rec["b"])

    def mode(self) -> str | None:
        """The pixels' mode unread: this process's cached pixels', a recipe's or an alias's source's (a crop and a
        resize keep the mode), else the node's file header (an upload's or a held image's); None where none says."""
        cached = self.store.cache.peek(self.key, node=False, count=False)  # nothing is read: not a hit
        if cached is not None:
            return cached.mode
        if self.source is not None:
            return self.source.mode()
        node = self.store.cache.node
        if node is None:
            return None
        return node.held_mode(self.session_id, self.rec["b"]) if self.rec["s"] == HELD else node.mode(self.key)

    def region(self, box: PixelBox) -> Image.Image | None:
        """A part of the pixels without the whole: cut from this process's cached pixels, else read from the node's
        file (an upload's or a held image's), else cut from the part of its source that a recipe without a resize
        (or an alias) stands for; None where none of these can (the caller loads it all)."""
        cache, rec, source = self.store.cache, self.rec, self.source
        cached = cache.peek(self.key, node=False)
        if cached is not None:
            return cached.crop(box)
        if source is not None:
            if rec["a"] is not None:
                return source.region(box)
            if rec["z"]:
                return None
            x, y = rec["x"][0], rec["x"][1]
            return source.region((box[0] + x, box[1] + y, box[2] + x, box[3] + y))
        node = cache.node
        if node is None:
            return None
        return node.held_region(self.session_id, rec["b"], box) if rec["s"] == HELD else node.region(self.key, box)


async def scan_sessions(redis: Any, prefix: str, offset: int, limit: int) -> tuple[list[SessionSummary], int]:
    """Every replica's sessions the caller may see (toolserver.ownership), oldest first: a SCAN over the meta keys
    (bounded by the sessions Redis holds), their fields read in one round trip."""
    rows = []
    keys = [key async for key in redis.scan_iter(match=f"{prefix}:{{*}}:meta", count=1000)]
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.hmget(key, "created_ms", "profile", "count", "tool_calls", "settings", "owner")
        replies = await pipe.execute() if keys else []
    for key, fields in zip(keys, replies, strict=True):
        if fields[4] is None or not may_see(fields[5].decode() if fields[5] else None):  # expired, or not theirs
            continue
        session_id = key.decode().split("{", 1)[1].rsplit("}", 1)[0]
        profile = fields[1].decode() if fields[1] else SessionSettings.model_validate_json(fields[4]).profile
        created = int(fields[0]) / 1000 if fields[0] else None
        rows.append((created or 0.0, SessionSummary(session_id, profile, int(fields[2] or 0), int(fields[3] or 0),
                                                    time.time() - created if created else None)))
    rows.sort(key=lambda row: row[0])
    return [summary for _, summary in rows[offset:offset + limit]], len(rows)
