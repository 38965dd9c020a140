"""The Redis store as a node's own store (`toolserver serve --workers N` with its private Redis): tool images held
once, as raw pixels in the node's shared memory (`NodePixels.hold`), with only their records in Redis; a crop (a
`zoom_in`) not even that: its record says how to remake it from the image it was cut from (`derive_pixels`).

A node's workers share one machine, so a tool image need not travel through Redis as a PNG: the worker that made it
writes its pixels once to the node's directory (in the tool's thread, before the call commits), the commit records
its name, and any worker reads it back with one copy. Never for a Redis that several nodes share: the supervisor
turns it on only for the Redis it started itself (`Settings.node_holds_images`).

A crop is cheaper to remake than to write and read back: writing a 1 MP crop's pixels to the node's memory cost
more server CPU than cutting it (BENCHMARKS.md, "One node, per call"), and a worker that needs it again cuts it
from its source, which its cache or the node's memory holds already. The recipe is exact (`Derivation.make` is how
the tool made it) and its source never leaves the session before it (a session's images go only all together).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import Any

from PIL import Image

from toolserver.errors import SessionGone
from toolserver.memorymap import Derivation, DerivedPixels, HeldPixels, image_nbytes
from toolserver.stores.redis_parts import DecodedCache

# Recipes on recipes: an image made from one that is itself made (a zoom into a zoom) is remade through the chain,
# one crop a step; past this depth its pixels are held instead, so that no read remakes a long chain.
MAX_DERIVED_DEPTH = 3


class NodeHeldImages:
    """What the Redis store does as a node's own store (mixed into `RedisStore`)."""

    cache: DecodedCache
    holds_images: bool
    redis: Any

    def _key(self, session_id: str, part: str) -> str:
        raise NotImplementedError

    def _guard(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def hold_pixels(self, session_id: str, key: str, image: Image.Image) -> HeldPixels | None:
        node = self.cache.node
        if not self.holds_images or node is None:
            return None
        # A name of its own for each attempt: a call whose lock lapsed never overwrites what a later call committed.
        name = f"{key}.{secrets.token_hex(4)}"
        size = node.hold(session_id, name, image)
        return None if size is None else HeldPixels(name, size)

    def keeps_recipes(self) -> bool:
        return self.holds_images

    def derive_pixels(self, session_id: str, derivation: Derivation, image: Image.Image) -> DerivedPixels | None:
        source = derivation.source
        if not self.holds_images or source.blob_key is None or source.depth >= MAX_DERIVED_DEPTH:
            return None
        return DerivedPixels(source.key, derivation.box, derivation.size, source.depth + 1, image_nbytes(image))

    def held_pixels(self, session_id: str, name: str) -> Image.Image:
        image = None if self.cache.node is None else self.cache.node.held(session_id, name)
        if image is None:
            raise SessionGone(f"session {session_id} has ended; create a new session")
        return image

    async def sweep_ended(self) -> int:
        """The node's files of sessions Redis no longer holds (expired or evicted: a release drops them itself)."""
        with self._guard():
            return await sweep_node(self.redis, lambda session_id: self._key(session_id, "meta"), self.cache)


async def sweep_node(client: Any, meta_key: Callable[[str], str], cache: DecodedCache) -> int:
    """Drop the node's files (`cache.node`) of every session whose meta key is gone; how many sessions."""
    node = cache.node
    if node is not None:  # an idle worker, too, lets go of the mappings of files other workers removed
        await asyncio.to_thread(node.forget_removed)
    ids = sorted(await asyncio.to_thread(node.sessions)) if node is not None else []
    if not ids:
        return 0
    async with client.pipeline(transaction=False) as pipe:
        for session_id in ids:
            pipe.exists(meta_key(session_id))
        live = await pipe.execute()
    gone = [session_id for session_id, n in zip(ids, live, strict=True) if not n]
    for session_id in gone:
        await asyncio.to_thread(cache.drop_session, session_id)
    return len(gone)
