"""The uvicorn server with a graceful drain.

On the first SIGTERM or SIGINT the drain gate closes: new requests get 503 `shutting_down` (the client
retries, or the load balancer sends them to another replica) and /readyz says not ready, while requests
in flight run to the end. When none is left, or after `grace_s`, uvicorn shuts down as usual (the
lifespan then stops the core: worker threads, models, the session store). A second signal stops at once.

SIGUSR1 logs what every asyncio task of the server is waiting on (its chain of awaits), for a server that
seems stuck: Python 3.11 has no other way to see into a live event loop (py-spy shows threads only).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from types import FrameType
from typing import Any

import uvicorn

from toolserver.middleware import DrainGate
from toolserver.node.handoff import Intake

log = logging.getLogger("toolserver")


class DrainingServer(uvicorn.Server):
    """`handoff`: a node worker's link to its supervisor, which hands it accepted connections (`node.handoff`)
    instead of a listening socket."""

    def __init__(self, config: uvicorn.Config, gate: DrainGate, *, grace_s: float,
                 handoff: socket.socket | None = None):
        super().__init__(config)
        self.gate = gate
        self.grace_s = grace_s
        self.intake: Intake | None = None
        self.handoff = handoff

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.gate.draining:  # asked twice: stop now
            super().handle_exit(sig, frame)
            return
        self._captured_signals.append(sig)  # re-raised after shutdown, as uvicorn does
        self.gate.close()

    async def startup(self, sockets: Any = None) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, log_tasks)
        if self.handoff is None:
            await super().startup(sockets=sockets)
            return
        await super().startup(sockets=[])  # no listener of its own: the supervisor hands it connections
        if self.started:
            config = self.config  # the protocol uvicorn makes for a connection it accepts (Server.startup)
            self.intake = Intake(self.handoff, lambda: config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=loop))
            self.intake.start(loop)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.intake is not None:
            self.intake.stop()  # as uvicorn stops accepting: new connections go to the other workers
        await super().shutdown(sockets=sockets)

    async def on_tick(self, counter: int) -> bool:
        gate = self.gate
        if gate.draining and not self.should_exit:
            assert gate.drain_started is not None
            waited = time.monotonic() - gate.drain_started
            if gate.in_flight == 0 or waited >= self.grace_s:
                log.info("drained", extra={"in_flight": gate.in_flight, "waited_s": round(waited, 3)})
                self.should_exit = True
        return await super().on_tick(counter)


def log_tasks() -> None:
    """One log line per asyncio task: the coroutines it is inside, outermost first, and what it awaits."""
    for task in asyncio.all_tasks():
        chain: list[str] = []
        awaited: Any = task.get_coro()
        while awaited is not None and len(chain) < 60:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is None:  # a future, a lock's waiter, a gather: what the innermost coroutine waits for
                chain.append(repr(awaited)[:160])
                break
            chain.append(f"{frame.f_code.co_qualname} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:"
                         f"{frame.f_lineno})")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        log.warning("task %s waits: %s", task.get_name(), " -> ".join(chain))
