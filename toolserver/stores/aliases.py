"""Names for sessions kept by adapters whose clients do not carry a session id: verl-tool's trajectory ids, the
MCP endpoint's own session ids. They live in the session store, so that every replica resolves a name the same way
(a trajectory's next step may reach any replica), and the first replica to name a session wins when two race.

An alias expires on its own after its TTL (it is refreshed on each lookup) and is dropped when its client ends
it; a name whose session has gone meanwhile is simply named again by the caller.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class Aliases:
    """Process-local names (the in-memory store's): bounded, least recently used first out."""

    def __init__(self, limit: int = 200_000):
        self.limit = limit
        self._names: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    async def claim(self, space: str, name: str, session_id: str, ttl_s: float) -> str:
        """Name `session_id` unless the name is taken; returns the session the name now stands for."""
        current = await self.get(space, name, ttl_s)
        if current is not None:
            return current
        self._names[(space, name)] = (session_id, time.monotonic() + ttl_s)
        while len(self._names) > self.limit:
            self._names.popitem(last=False)
        return session_id

    async def get(self, space: str, name: str, ttl_s: float | None = None) -> str | None:
        found = self._names.get((space, name))
        if found is None:
            return None
        if found[1] < time.monotonic():
            del self._names[(space, name)]
            return None
        if ttl_s is not None:
            self._names[(space, name)] = (found[0], time.monotonic() + ttl_s)
        self._names.move_to_end((space, name))
        return found[0]

    async def drop(self, space: str, name: str) -> str | None:
        found = self._names.pop((space, name), None)
        return None if found is None or found[1] < time.monotonic() else found[0]

    async def drop_if(self, space: str, name: str, session_id: str) -> None:
        """Forget `name` if it still names `session_id` (a session found gone; another replica may have named a new
        one since)."""
        if await self.get(space, name) == session_id:
            await self.drop(space, name)

    def __len__(self) -> int:
        return len(self._names)


class RedisAliases(Aliases):
    """Names in Redis (`<prefix>:alias:<space>:<name>`), claimed with SET NX so that one of racing replicas wins."""

    def __init__(self, redis: Any, prefix: str, guard: Callable[[], AbstractContextManager[None]]):
        super().__init__()
        self.redis = redis
        self.prefix = prefix
        self.guard = guard

    def _key(self, space: str, name: str) -> str:
        return f"{self.prefix}:alias:{space}:{name}"

    async def claim(self, space: str, name: str, session_id: str, ttl_s: float) -> str:
        key, ttl_ms = self._key(space, name), max(1, math.ceil(ttl_s * 1000))
        with self.guard():
            for _ in range(3):  # a name that expires between the SET and the GET is tried again
                if await self.redis.set(key, session_id, nx=True, px=ttl_ms):
                    return session_id
                current = await self.redis.get(key)
                if current is not None:
                    await self.redis.pexpire(key, ttl_ms)
                    return _text(current)
        return session_id

    async def get(self, space: str, name: str, ttl_s: float | None = None) -> str | None:
        key = self._key(space, name)
        with self.guard():
            if ttl_s is None:
                current = await self.redis.get(key)
            else:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.get(key)
                    pipe.pexpire(key, max(1, math.ceil(ttl_s * 1000)))
                    current, _ = await pipe.execute()
        if current is None:
            return None
        return _text(current)

    async def drop(self, space: str, name: str) -> str | None:
        with self.guard():
            current = await self.redis.getdel(self._key(space, name))
        if current is None:
            return None
        return _text(current)

    def __len__(self) -> int:
        return 0  # not counted: every replica's names are shared


def _text(reply: bytes | str) -> str:
    """A Redis reply as text (the client is not set to decode responses)."""
    return reply.decode() if isinstance(reply, bytes) else str(reply)
