"""Readiness (`/readyz`): whether this server can serve now, and what it serves (profiles, store, pool, models).

Not ready while the session store is unreachable, while the server drains, or when `sr_required` is set and no
SMFANet weights are installed; `reason` then says which.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel

from toolserver import __version__
from toolserver.core.wiring import Services
from toolserver.profiles import PROFILES


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    version: str
    profiles: list[str]
    sessions: int | str | None
    bytes_held: int | str | None
    session_store: dict[str, int | str]
    workers: int
    queue_limit: int
    super_resolution: dict[str, Any]
    documents: dict[str, Any]
    sandbox: dict[str, Any]
    # OpenThinkIMG's perception models by name: where each was found (or why not), loaded yet, the last load error.
    perception: dict[str, dict[str, Any]] = {}
    reason: str | None = None

    @property
    def ready(self) -> bool:
        return self.status == "ready"

    def body(self) -> dict[str, Any]:
        """The JSON body: `reason` only when not ready."""
        return self.model_dump(exclude_none=False, exclude={"reason"} if self.reason is None else set())


async def readiness(services: Services, *, draining: bool = False) -> Readiness:
    await asyncio.to_thread(services.refresh_models)  # a model deployment may be elsewhere: not on the loop
    sr = services.sr.status()
    reasons = []
    if services.settings.sr_required and not sr["available"]:
        reasons.append(services.sr.unavailable_reason())
    if draining:
        reasons.append("the server is shutting down")
    store_problem = await services.store.check()
    if store_problem:
        reasons.append(store_problem)
    store = services.store.stats()
    return Readiness(status="not ready" if reasons else "ready", version=__version__, profiles=list(PROFILES),
                     sessions=store.get("sessions"), bytes_held=store.get("bytes_held"), session_store=store,
                     workers=services.pool.workers, queue_limit=services.pool.queue_limit, super_resolution=sr,
                     documents=services.documents.status(), sandbox=services.sandbox.describe(),
                     perception={name: front.status() for name, front in services.perception.items()},
                     reason="; ".join(reasons) if reasons else None)
