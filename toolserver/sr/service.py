"""SMFANet as a model service: `SRModel` (where the network runs) and `SRFront` (what tools hold as `ctx.sr`).

The front has the engine's interface (`scales`, `upscale_many`, `status`, …) and reaches the model through a
transport (`toolserver.batching`): in this process under uvicorn, or a Ray Serve deployment on a GPU node. A
call is one `UpscaleRequest` per image; the model queues every request of a batch before waiting for any, so the
engine's batching rule (same-shaped tiles share a forward pass on a GPU) applies across sessions. Requests carry
a timeout rather than a deadline, because `time.monotonic()` does not travel between processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from toolserver.batching import ModelFront
from toolserver.sr.engine import SREngine, SRTimeout, SRUnavailable, Upscaled

MODEL_NAME = "smfanet"


@dataclass
class UpscaleRequest:
    pixels: np.ndarray  # H x W x 3, uint8
    scale: int
    timeout_s: float | None = None


@dataclass
class UpscaleReply:
    pixels: np.ndarray | None
    scale: int
    checkpoint: str = ""
    device: str = ""
    tiles: int = 0
    seconds: float = 0.0
    batch: int = 1  # calls in the batch this one ran in
    error: str | None = None  # "unavailable", "timeout" or "invalid"
    message: str = ""


class SRModel:
    """The engine behind a transport: `batch` runs several callers' requests together."""

    def __init__(self, engine: SREngine):
        self.engine = engine

    def batch(self, requests: list[UpscaleRequest]) -> list[UpscaleReply]:
        started = time.perf_counter()
        now = time.monotonic()
        jobs = [(r.pixels, r.scale, None if r.timeout_s is None else now + r.timeout_s) for r in requests]
        outcomes = self.engine.run_jobs(jobs)
        seconds = time.perf_counter() - started
        return [_reply(request, outcome, self.engine, seconds, len(requests))
                for request, outcome in zip(requests, outcomes, strict=True)]

    def describe(self) -> dict[str, Any]:
        return {"status": self.engine.status(), "unavailable_reason": self.engine.unavailable_reason()}

    def warm(self) -> None:
        for scale in self.engine.scales:
            self.engine.upscale(Image.new("RGB", (16, 16)), scale)

    def close(self) -> None:
        self.engine.close()


def _reply(request: UpscaleRequest, outcome: tuple[np.ndarray, int] | Exception, engine: SREngine,
           seconds: float, batch: int) -> UpscaleReply:
    if isinstance(outcome, Exception):
        kind = ("unavailable" if isinstance(outcome, SRUnavailable) else
                "timeout" if isinstance(outcome, SRTimeout) else "invalid")
        return UpscaleReply(None, request.scale, batch=batch, error=kind, message=str(outcome))
    pixels, tiles = outcome
    return UpscaleReply(pixels, request.scale, engine.checkpoint_name(request.scale), engine.device, tiles, seconds,
                        batch)


class SRFront(ModelFront):
    """The engine's interface over a transport; thread-safe. What the model serves is read as `ModelFront` says."""

    model_name = MODEL_NAME

    def _unanswered(self, exc: Exception) -> dict[str, Any]:
        return {"status": {"available": False, "scales": [], "problems": [f"{type(exc).__name__}: {exc}"],
                           "device": "unknown"},
                "unavailable_reason": f"the super-resolution model ({self.transport.where}) did not answer: {exc}"}

    @property
    def scales(self) -> list[int]:
        return [int(s) for s in self._info["status"].get("scales", [])]

    @property
    def available(self) -> bool:
        return bool(self._info["status"].get("available"))

    def unavailable_reason(self, scale: int | None = None) -> str:
        if scale is None or not self.scales:
            return str(self._info["unavailable_reason"])
        return f"scale x{scale} is not installed; available scales: {', '.join(f'x{s}' for s in self.scales)}"

    def upscale(self, image: Image.Image, scale: int, *, deadline: float | None = None) -> Upscaled:
        return self.upscale_many([(image, scale)], deadline=deadline)[0]

    def upscale_many(self, items: list[tuple[Image.Image, int]], *,
                     deadline: float | None = None) -> list[Upscaled]:
        """Each image enlarged by its scale; raises SRUnavailable, SRTimeout or ValueError as the engine does."""
        started = time.perf_counter()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        requests = [UpscaleRequest(np.asarray(image.convert("RGB"), dtype=np.uint8), scale, timeout)
                    for image, scale in items]
        replies = self._call_all(requests, timeout)
        out = []
        for reply in replies:
            self._ran_in(reply.batch)
            if reply.error is not None or reply.pixels is None:
                raise {"unavailable": SRUnavailable, "timeout": SRTimeout}.get(reply.error or "", ValueError)(
                    reply.message)
            out.append(Upscaled(Image.fromarray(reply.pixels), reply.scale, reply.checkpoint, reply.device,
                                reply.tiles, time.perf_counter() - started))
        return out

    def _call_all(self, requests: list[UpscaleRequest], timeout: float | None) -> list[UpscaleReply]:
        """Several requests at once (a `magnify` of several boxes) are sent together, so they can share a batch."""
        try:
            return self.transport.call_many(requests, None if timeout is None else timeout + 30.0)
        except TimeoutError as exc:
            raise SRTimeout("super-resolution did not finish before the deadline") from exc
        except ConnectionError as exc:  # the model's process went away, or none answers (toolserver.hostlink)
            raise SRUnavailable(str(exc)) from exc
