"""The uvicorn server with a graceful drain.

On the first SIGTERM or SIGINT the drain gate closes: new requests get 503 `shutting_down` (the client
retries, or the load balancer sends them to another replica) and /readyz says not ready, while requests
in flight run to the end. When none is left, or after `grace_s`, uvicorn shuts down as usual (the
lifespan then stops the core: worker threads, models, the session store). A second signal stops at once.
"""

from __future__ import annotations

import logging
import time
from types import FrameType

import uvicorn

from toolserver.middleware import DrainGate

log = logging.getLogger("toolserver")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, gate: DrainGate, *, grace_s: float):
        super().__init__(config)
        self.gate = gate
        self.grace_s = grace_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.gate.draining:  # asked twice: stop now
            super().handle_exit(sig, frame)
            return
        self._captured_signals.append(sig)  # re-raised after shutdown, as uvicorn does
        self.gate.close()

    async def on_tick(self, counter: int) -> bool:
        gate = self.gate
        if gate.draining and not self.should_exit:
            assert gate.drain_started is not None
            waited = time.monotonic() - gate.drain_started
            if gate.in_flight == 0 or waited >= self.grace_s:
                log.info("drained", extra={"in_flight": gate.in_flight, "waited_s": round(waited, 3)})
                self.should_exit = True
        return await super().on_tick(counter)
