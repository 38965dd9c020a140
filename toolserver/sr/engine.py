"""Super-resolution inference: one worker per device owns the networks and takes jobs from a queue.

Why a dedicated worker rather than running the network in the request threads: PyTorch already spreads
one forward pass over every core (or the whole GPU). Several requests running the network at once would
only oversubscribe the cores and multiply peak memory; queued one after another, each finishes sooner and
memory stays bounded. On a GPU, queued requests of the same shape and scale are batched into one pass.

Large inputs are cut into tiles that overlap by `tile_pad` pixels of context on every side; each tile's
centre is kept. All tiles of an image have the same shape (edge tiles shift inwards instead of shrinking),
so a GPU can batch them too. SMFANet's EASA branch uses whole-tile statistics (a variance and a max-pooled
map), so tiled output is not bit-identical to whole-image output; the context keeps the difference far
below visibility (measured in tests/test_sr.py and BENCHMARKS.md).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from toolserver.sr.arch import MIN_INPUT_SIDE
from toolserver.sr.checkpoints import CheckpointError, InstalledCheckpoint, load_network, scan

log = logging.getLogger("toolserver.sr")


class SRUnavailable(Exception):
    """No usable checkpoint for the requested scale (or none at all)."""


class SRTimeout(TimeoutError):
    """The job's deadline passed before it finished; the rest of its work was skipped."""


@dataclass(frozen=True)
class Span:
    """One tile along one axis: the input window it reads and the core of it whose output is kept."""

    core0: int
    core1: int
    win0: int
    win1: int


def spans(length: int, tile: int, pad: int) -> list[Span]:
    """Cover [0, length) with as few equal cores as windows of at most `tile` allow, each read with `pad` context.

    Every window has the same size (cores are spread evenly and edge windows shift inwards rather than
    shrink), so tiles can share a batch, and the extra work is only the context: about 2 * pad per tile.
    """
    if length <= tile:
        return [Span(0, length, 0, length)]
    if tile <= 2 * pad:
        raise ValueError(f"tile {tile} must be larger than twice the padding {pad}")
    count = math.ceil(length / (tile - 2 * pad))
    step = math.ceil(length / count)
    window = min(length, step + 2 * pad)
    out = []
    for core0 in range(0, length, step):
        core1 = min(core0 + step, length)
        win0 = min(max(core0 - pad, 0), length - window)
        out.append(Span(core0, core1, win0, win0 + window))
    return out


@dataclass(eq=False)  # identity, not array comparison, when removed from the queue
class _Job:
    pixels: np.ndarray  # H x W x 3, uint8
    scale: int
    deadline: float | None
    future: Future = field(default_factory=Future)

    @property
    def batch_key(self) -> tuple[int, int, int]:
        return (self.scale, *self.pixels.shape[:2])


@dataclass(frozen=True)
class Upscaled:
    image: Image.Image
    scale: int
    checkpoint: str
    device: str
    tiles: int
    seconds: float


class SREngine:
    """Thread-safe: `upscale` may be called from any thread; the work runs on the device worker."""

    def __init__(self, model_dir: Path, *, device: str = "auto", tile: int = 256, tile_pad: int = 16,
                 max_batch: int = 8, channels_last: bool = True, half: bool = False, prefer_plus: bool = False,
                 verify_sha256: bool = True, threads: int | None = None):
        self.model_dir = Path(model_dir)
        self.requested_device = device
        self.tile = tile
        self.tile_pad = tile_pad
        self.max_batch = max(1, max_batch)
        self.channels_last = channels_last
        self.half = half
        self.prefer_plus = prefer_plus
        self.verify_sha256 = verify_sha256
        self.threads = threads
        self._checkpoints: dict[int, InstalledCheckpoint] = {}
        self._problems: list[str] = []
        self._networks: dict[int, Any] = {}
        self._queue: deque[_Job] = deque()
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._device: str | None = None
        self.jobs_done = 0
        self.batches_run = 0
        self.refresh()

    # -- what is installed ---------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the model directory (after a download)."""
        chosen: dict[int, InstalledCheckpoint] = {}
        problems = []
        for found in scan(self.model_dir, verify=self.verify_sha256):
            if found.problem:
                problems.append(f"{found.known.file}: {found.problem}")
                continue
            current = chosen.get(found.known.scale)
            is_plus = found.known.variant == "smfanet-plus"
            if current is None or is_plus == self.prefer_plus:
                chosen[found.known.scale] = found
        with self._cond:
            self._checkpoints = dict(sorted(chosen.items()))
            self._problems = problems
            self._networks = {s: n for s, n in self._networks.items() if s in chosen}

    @property
    def scales(self) -> list[int]:
        return list(self._checkpoints)

    @property
    def available(self) -> bool:
        return bool(self._checkpoints)

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = _pick_device(self.requested_device)
        return self._device

    def status(self) -> dict[str, Any]:
        try:
            device = self.device
        except SRUnavailable as exc:
            device = f"unavailable: {exc}"
        return {
            "available": self.available,
            "scales": self.scales,
            "checkpoints": {s: c.known.file for s, c in self._checkpoints.items()},
            "model_dir": str(self.model_dir),
            "device": device,
            "problems": list(self._problems),
            "queued": len(self._queue),
        }

    def unavailable_reason(self, scale: int | None = None) -> str:
        if not self._checkpoints:
            why = f"no SMFANet checkpoint in {self.model_dir}"
            if self._problems:
                why += " (" + "; ".join(self._problems) + ")"
            return why + "; install them with `toolserver weights download`"
        return f"scale x{scale} is not installed; available scales: {', '.join(f'x{s}' for s in self.scales)}"

    # -- the public calls ---------------------------------------------------------------------
    def upscale(self, image: Image.Image, scale: int, *, deadline: float | None = None) -> Upscaled:
        """Enlarge an RGB image by `scale` with SMFANet. Blocks until done; raises SRUnavailable, SRTimeout."""
        return self.upscale_many([(image, scale)], deadline=deadline)[0]

    def upscale_many(self, items: list[tuple[Image.Image, int]], *,
                     deadline: float | None = None) -> list[Upscaled]:
        """Enlarge several images, queued together so same-shaped ones can share a GPU batch.

        `deadline` is a `time.monotonic()` value: work not started by then is skipped (SRTimeout).
        """
        jobs = []
        for image, scale in items:
            if scale not in self._checkpoints:
                raise SRUnavailable(self.unavailable_reason(scale))
            pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
            if pixels.shape[0] == 0 or pixels.shape[1] == 0:
                raise ValueError("cannot upscale an empty image")
            jobs.append(_Job(pixels=pixels, scale=scale, deadline=deadline))
        started = time.perf_counter()
        for job in jobs:
            self._submit(job)
        # The worker enforces the deadline between tiles; the margin covers the tile in progress.
        wait = None if deadline is None else max(0.0, deadline - time.monotonic()) + 30.0
        out = []
        for job in jobs:
            try:
                pixels, tiles = job.future.result(timeout=wait)
            except TimeoutError as exc:
                raise SRTimeout("super-resolution did not finish before the deadline") from exc
            checkpoint = self._checkpoints.get(job.scale)
            name = checkpoint.known.file if checkpoint else "?"
            out.append(Upscaled(Image.fromarray(pixels), job.scale, name, self.device, tiles,
                                time.perf_counter() - started))
        return out

    def _submit(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                raise SRUnavailable("the super-resolution engine is shut down")
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="toolserver-sr", daemon=True)
                self._worker.start()
            self._queue.append(job)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for job in pending:
            job.future.set_exception(SRUnavailable("the super-resolution engine is shut down"))

    # -- the device worker --------------------------------------------------------------------
    def _take(self) -> list[_Job] | None:
        """The next job, plus queued jobs it can share a GPU batch with (same scale and shape, untiled)."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            first = self._queue.popleft()
            batch = [first]
            h, w = first.pixels.shape[:2]
            if self.device != "cpu" and max(h, w) <= self.tile:
                for job in list(self._queue):
                    if len(batch) >= self.max_batch:
                        break
                    if job.batch_key == first.batch_key:
                        self._queue.remove(job)
                        batch.append(job)
            return batch

    def _work(self) -> None:
        import torch

        if self.threads:
            torch.set_num_threads(self.threads)
        while (batch := self._take()) is not None:
            live = [job for job in batch if job.future.set_running_or_notify_cancel()]
            try:
                if len(live) > 1:
                    outputs = self._run_stacked(live)
                    for job, out in zip(live, outputs, strict=True):
                        job.future.set_result((out, 1))
                elif live:
                    live[0].future.set_result(self._run_tiled(live[0]))
            except BaseException as exc:  # the worker must survive anything one job does
                log.warning("super-resolution job failed: %s: %s", type(exc).__name__, exc)
                for job in live:
                    if not job.future.done():
                        job.future.set_exception(exc)
                if _is_oom(exc):
                    _empty_cache()
            self.jobs_done += len(live)

    def _network(self, scale: int) -> Any:
        network = self._networks.get(scale)
        if network is None:
            import torch

            checkpoint = self._checkpoints.get(scale)
            if checkpoint is None:
                raise SRUnavailable(self.unavailable_reason(scale))
            try:
                network, _config = load_network(checkpoint.path)
            except CheckpointError as exc:
                raise SRUnavailable(str(exc)) from exc
            network = network.to(self.device)
            if self.device == "cpu" and self.channels_last:
                network = network.to(memory_format=torch.channels_last)
            if self.half and self.device != "cpu":
                network = network.half()
            self._networks[scale] = network
        return network

    def _forward(self, scale: int, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Run same-shaped uint8 HxWx3 windows through the network; uint8 outputs, clamped and rounded."""
        import torch

        network = self._network(scale)
        h, w = windows[0].shape[:2]
        pad_h, pad_w = max(0, MIN_INPUT_SIDE - h), max(0, MIN_INPUT_SIDE - w)
        with torch.inference_mode():
            x = torch.from_numpy(np.stack(windows)).to(self.device).permute(0, 3, 1, 2)
            x = x.half() if self.half and self.device != "cpu" else x.float()
            x = x.div_(255.0)
            if pad_h or pad_w:  # smaller than EASA's pooling needs: replicate edges, crop the output back
                x = torch.nn.functional.pad(x, (0, pad_w, 0, pad_h), mode="replicate")
            if self.device == "cpu" and self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            y = network(x)[:, :, : h * scale, : w * scale]
            y = y.float().clamp_(0.0, 1.0).mul_(255.0).round_().to(torch.uint8)
            y = y.permute(0, 2, 3, 1).contiguous().cpu().numpy()
        self.batches_run += 1
        return list(y)

    def _run_stacked(self, jobs: list[_Job]) -> list[np.ndarray]:
        return self._forward(jobs[0].scale, [job.pixels for job in jobs])

    def _run_tiled(self, job: _Job) -> tuple[np.ndarray, int]:
        pixels, s = job.pixels, job.scale
        h, w = pixels.shape[:2]
        out = np.empty((h * s, w * s, 3), dtype=np.uint8)
        tiles = list(itertools.product(spans(h, self.tile, self.tile_pad), spans(w, self.tile, self.tile_pad)))
        per_batch = 1 if self.device == "cpu" else self.max_batch
        for group in _chunks(tiles, per_batch):
            if job.deadline is not None and time.monotonic() > job.deadline:
                raise SRTimeout("super-resolution did not finish before the deadline")
            windows = [pixels[ys.win0:ys.win1, xs.win0:xs.win1] for ys, xs in group]
            for (ys, xs), result in zip(group, self._forward(s, windows), strict=True):
                out[ys.core0 * s:ys.core1 * s, xs.core0 * s:xs.core1 * s] = result[
                    (ys.core0 - ys.win0) * s:(ys.core1 - ys.win0) * s,
                    (xs.core0 - xs.win0) * s:(xs.core1 - xs.win0) * s,
                ]
        return out, len(tiles)


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _pick_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise SRUnavailable(f"device {requested!r} was requested but CUDA is not available")
    return requested


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc)


def _empty_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
