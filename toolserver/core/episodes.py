"""Episode slots: a bound on the episodes that adapters hold open for a connection (OpenEnv's WebSocket episodes
and its MCP sessions), each of which owns one session until the connection ends.

Sessions made through the REST API live until released or expired; an episode lives while its connection does, so
a trainer opening one connection per rollout could otherwise hold sessions without limit. A slot is taken when the
connection opens and given back when it ends; at the bound the adapter refuses the connection (OpenEnv's
`CAPACITY_REACHED`). The count is per process, as connections are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from toolserver.errors import ServiceError


class CapacityReached(ServiceError):
    status = 503
    code = "capacity_reached"

    def __init__(self, active: int, limit: int):
        super().__init__(f"Server at capacity: {active}/{limit} episodes are open; close one or retry later")
        self.active = active
        self.limit = limit


class EpisodeSlots:
    def __init__(self, limit: int):
        self.limit = limit
        self.active = 0

    def take(self) -> None:
        """One slot, or `CapacityReached` when all are taken."""
        if self.active >= self.limit:
            raise CapacityReached(self.active, self.limit)
        self.active += 1

    def give_back(self) -> None:
        self.active = max(0, self.active - 1)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.take()
        try:
            yield
        finally:
            self.give_back()
