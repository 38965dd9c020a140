"""The Redis store's per-session lock: a short lease, renewed while its call runs, whose token fences the call's
commit.

Why a lease and not one long timeout: a lock must not outlive its holder. A `SET NX PX` that Redis buffered
while it was frozen runs when it resumes, for a token nobody holds; a lock held when Redis was killed comes back
from its append-only file. With a lease of a few seconds either is gone a few seconds later, and a call that runs
longer keeps its lease by renewing it (every third of the lease, for at most `max_hold_s`). Tokens whose fate is
unknown (an acquire or a release that timed out) are released as soon as Redis answers again, so this replica's
next call does not even wait for the lease.

Fencing: the commit script of a call writes only while the lock still holds the call's token. A call whose
lease ran out during a stall (another call may have run since) commits nothing and says so; it is never half
applied and never applied late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aredis
from redis.exceptions import LockError

log = logging.getLogger("toolserver.redis")

# KEYS: lock. ARGV: token. Deletes the lock only if it holds this token.
SCRIPT_RELEASE_IF_HELD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_STORE_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError)
MAX_ORPHANS = 10_000
LOCK_POLL_MAX_S = 0.1  # the longest pause between two tries of a busy lock


# How a lock is taken: SET NX PX with the token, and whatever else the same round trip reads (the Redis store reads
# the session in the same script): (taken, what was read).
Take = Callable[[str], Awaitable[tuple[bool, Any]]]


@dataclass
class Hold:
    """A held lock: its token (the fence), what the taking read, and whether a commit has released it already
    (the commit script deletes the lock with its last write: one round trip less per call)."""

    token: str
    found: Any = None
    released: bool = False


class SessionLocks:
    def __init__(self, client: aredis.Redis, *, lease_s: float, wait_s: float, max_hold_s: float | None = None):
        self.redis = client
        self.lease_s = lease_s
        self.wait_s = wait_s  # how long a call waits for a session another call holds
        self.max_hold_s = wait_s if max_hold_s is None else max_hold_s  # the longest a call may keep the lock
        self._release = client.register_script(SCRIPT_RELEASE_IF_HELD)
        self._orphans: deque[tuple[str, str]] = deque(maxlen=MAX_ORPHANS)

    async def release_orphans(self) -> None:
        """Tokens this replica may have left behind in an outage: released, now that Redis answers."""
        while self._orphans:
            key, token = self._orphans.popleft()  # taken first: concurrent calls share the queue
            try:
                await self._release(keys=[key], args=[token])
            except _STORE_ERRORS:
                self._orphans.append((key, token))
                raise

    @contextlib.asynccontextmanager
    async def hold(self, key: str, session_id: str, take: Take | None = None) -> AsyncIterator[Hold | None]:
        """The lock, renewed while held; yields its `Hold` (the token is the fence), or None if it stayed busy
        `wait_s`. `take(token)` takes it (a plain SET NX PX by default)."""
        token = secrets.token_hex(16)
        lock = self.redis.lock(key, timeout=self.lease_s, thread_local=False)

        async def plain(token: str) -> tuple[bool, Any]:
            return bool(await lock.acquire(blocking=False, token=token)), None

        take = take or plain
        try:
            await self.release_orphans()
            acquired, found = await take(token)
            if not acquired:
                started = time.monotonic()
                log.info("session %s: a call waits for the session's lock, held by another call", session_id)
                acquired, found = await self._wait_for(take, token, started)
                log.info("session %s: lock %s after %.2f s", session_id, "taken" if acquired else "still busy",
                         time.monotonic() - started)
        except _STORE_ERRORS:
            self._orphans.append((key, token))  # the SET may have gone through
            raise
        if not acquired:
            yield None
            return
        lock.local.token = token.encode()  # what its renewals check (taken by `take`, perhaps not by `lock`)
        holding = Hold(token, found)
        held = asyncio.Event()
        held.set()
        renewal = asyncio.create_task(self._renew(lock, session_id, held, holding))
        try:
            yield holding
        finally:
            # The flag, not only the cancel, ends the renewal: redis-py can turn a cancel that lands inside a
            # command during a stall into a store error, which the loop takes for an outage and carries on
            # (seen in the chaos soak: the holder then waited for its renewal forever and the session stayed
            # locked). The wait is bounded for the same reason.
            held.clear()
            renewal.cancel()
            await asyncio.wait({renewal}, timeout=self.lease_s)
            if not holding.released:
                await self._release_token(key, token)

    async def _wait_for(self, take: Take, token: str, started: float) -> tuple[bool, Any]:
        """Tries again with a growing pause (5 ms doubling to 100 ms) until `wait_s` has passed. A fixed short
        pause made every waiter poll Redis 200 times a second: under a retry storm (clients retrying calls that
        wait behind their own originals) that polling alone kept the event loop and Redis busy."""
        pause = 0.005
        while time.monotonic() - started < self.wait_s:
            await asyncio.sleep(min(pause, max(0.0, self.wait_s - (time.monotonic() - started))))
            acquired, found = await take(token)
            if acquired:
                return True, found
            pause = min(pause * 2, LOCK_POLL_MAX_S)
        return False, None

    async def _renew(self, lock: aredis.lock.Lock, session_id: str, held: asyncio.Event, holding: Hold) -> None:
        """Renews the lease every third of it while `held` is set, for at most `max_hold_s`: past that the call is
        stuck somewhere, and its session must not stay locked for it (the fence refuses its late commit)."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(self.lease_s / 3)
            if not held.is_set() or holding.released:
                return
            if time.monotonic() - started > self.max_hold_s:
                log.warning("session %s: a call has held the session's lock for %.0f s; its lease is left to run "
                            "out, and its result will not be committed", session_id, time.monotonic() - started)
                return
            try:
                await lock.reacquire()
            except LockError:
                log.warning("session %s: the call's lock lease ran out (a Redis stall?); its result will not be "
                            "committed", session_id)
                return
            except _STORE_ERRORS:
                continue  # Redis away: the lease may run out, and the fence then refuses the commit

    async def _release_token(self, key: str, token: str) -> None:
        try:
            await self._release(keys=[key], args=[token])
        except _STORE_ERRORS:
            self._orphans.append((key, token))  # released when Redis answers again; else its lease ends it
