"""Super-resolution inference: worker threads that own the networks, fed tiles from one queue.

Every image is cut into tiles (one tile when it is small) and every tile is a unit of work, so a large
image spreads over all workers and many small requests share them fairly, in arrival order.

- On the CPU there is one worker per core, each running the network with one intra-op thread (OpenMP
  thread counts are per calling thread, so this does not touch the rest of the process). SMFANet's many
  small depthwise and 1x1 convolutions parallelise poorly inside one forward pass: two single-threaded
  workers did about twice the work of one two-threaded pass here (BENCHMARKS.md).
- On a GPU there is one worker; queued tiles with the same scale and shape (tiles of one image, or
  same-sized requests of several sessions) are stacked into one batch of up to `max_batch` (the rule is
  `batch_tiles`: `auto` batches on a GPU only; `always` also on the CPU, where the tests check it).

Tiles are windows of at most `tile` input pixels read with `tile_pad` pixels of context on every side;
each window's centre (its core) is kept. SMFANet's EASA branch uses whole-window statistics (a variance and
a max-pooled map), so tiled output is not bit-identical to whole-image output; the context keeps the
difference far below visibility (tests/test_sr_engine.py, BENCHMARKS.md). Peak memory is bounded by the
tiles in flight, whatever the image size; only the uint8 output grows with it (its tiles' outputs are kept until
the thread waiting for the image puts them together: twice the output, at the end of a large image).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from toolserver.pool import lower_thread_priority
from toolserver.sr import MIN_INPUT_SIDE
from toolserver.sr.checkpoints import CheckpointError, InstalledCheckpoint, load_network, scan
from toolserver.sr.graphs import CudaGraphs
from toolserver.sr.staging import PinnedStaging, empty_cache, is_oom
from toolserver.sr.tiling import Span, _Job, _Tile, assemble, spans

__all__ = ["SREngine", "SRTimeout", "SRUnavailable", "Span", "Upscaled", "spans"]

log = logging.getLogger("toolserver.sr")


class SRUnavailable(Exception):
    """No usable checkpoint for the requested scale (or none at all)."""


class SRTimeout(TimeoutError):
    """The job's deadline passed before it finished; the rest of its work was skipped."""


@dataclass(frozen=True)
class Upscaled:
    image: Image.Image
    scale: int
    checkpoint: str
    device: str
    tiles: int
    seconds: float


class SREngine:
    """Thread-safe: `upscale` may be called from any thread; the work runs on the engine's workers."""

    def __init__(self, model_dir: Path, *, device: str = "auto", tile: int = 512, tile_pad: int = 16,
                 max_batch: int = 8, channels_last: bool = True, half: bool = False, prefer_plus: bool = False,
                 verify_sha256: bool = True, cpu_workers: int | None = None, threads: int | None = None,
                 nice: int = 0, batch_tiles: str = "auto", cuda_graphs: bool = False,
                 switch_interval_s: float | None = None):
        self.model_dir = Path(model_dir)
        self.requested_device = device
        self.tile, self.tile_pad, self.max_batch = tile, tile_pad, max(1, max_batch)
        self.channels_last, self.half, self.prefer_plus = channels_last, half, prefer_plus
        self.verify_sha256 = verify_sha256
        cores = os.cpu_count() or 1
        self.cpu_workers = max(1, cpu_workers or cores)
        self.threads = max(1, threads or cores // self.cpu_workers)  # torch threads per CPU worker
        self.nice = nice  # CPU workers yield to cheap calls (toolserver.pool)
        self.batch_tiles = batch_tiles  # "auto": on a GPU only; "always"; "never"
        self._checkpoints: dict[int, InstalledCheckpoint] = {}
        self._installed: list[InstalledCheckpoint] = []  # every verified file (both x4 variants)
        self._problems: list[str] = []
        self._networks: dict[int, Any] = {}
        self._network_lock = threading.Lock()
        self._queue: deque[_Tile] = deque()
        self._cond = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._closed = False
        self._device: str | None = None
        self._staging = PinnedStaging()  # GPU outputs come back through pinned memory
        self.cuda_graphs = cuda_graphs  # batches replayed as CUDA graphs on a GPU (sr/graphs.py)
        self.switch_interval_s = switch_interval_s  # the process's GIL switch interval once a GPU worker runs
        self._graphs = CudaGraphs("cpu", enabled=False)  # the GPU worker's, made as it starts (`_start_workers`)
        self.jobs_done = 0
        self.batches_run = 0
        self.refresh()

    # -- what is installed ---------------------------------------------------------------------
    def refresh(self) -> None:
        """Re-read the model directory (after a download)."""
        chosen: dict[int, InstalledCheckpoint] = {}
        problems = []
        installed = []
        for found in scan(self.model_dir, verify=self.verify_sha256):
            if found.problem:
                problems.append(f"{found.known.file}: {found.problem}")
                continue
            installed.append(found)
            current = chosen.get(found.known.scale)
            is_plus = found.known.variant == "smfanet-plus"
            if current is None or is_plus == self.prefer_plus:
                chosen[found.known.scale] = found
        with self._network_lock:
            self._checkpoints = dict(sorted(chosen.items()))
            self._installed = installed
            self._problems = problems
            self._networks = {}

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

    @property
    def batches_tiles(self) -> bool:
        """Whether queued same-shaped tiles (of one image or of several callers') share a forward pass. On the CPU
        one pass per core does more work than batched passes (BENCHMARKS.md), so `auto` batches on a GPU only."""
        return self.batch_tiles == "always" or (self.batch_tiles == "auto" and self.device != "cpu")

    def status(self) -> dict[str, Any]:
        try:
            device = self.device
        except SRUnavailable as exc:
            device = f"unavailable: {exc}"
        return {
            "available": self.available,
            "scales": self.scales,
            "checkpoints": {s: c.known.file for s, c in self._checkpoints.items()},  # the one used per scale
            "installed": [{"name": c.known.name, "scale": c.known.scale, "variant": c.known.variant,
                           "file": c.known.file} for c in self._installed],
            "model_dir": str(self.model_dir),
            "device": device,
            "workers": 1 if device != "cpu" else self.cpu_workers,
            "batch_tiles": self.batch_tiles, "max_batch": self.max_batch,
            "problems": list(self._problems),
            "queued_tiles": len(self._queue),
            "cuda_graphs": self._graphs.status(),
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

        `deadline` is a `time.monotonic()` value: tiles not started by then are skipped (SRTimeout).
        """
        pixels = [np.asarray(image.convert("RGB"), dtype=np.uint8) for image, _ in items]
        started = time.perf_counter()
        outcomes = self.run_jobs([(p, scale, deadline) for p, (_, scale) in zip(pixels, items, strict=True)])
        out = []
        for (_, scale), outcome in zip(items, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise outcome
            out.append(Upscaled(Image.fromarray(outcome[0]), scale, self.checkpoint_name(scale), self.device,
                                outcome[1], time.perf_counter() - started))
        return out

    def run_jobs(self, jobs: list[tuple[np.ndarray, int, float | None]]) -> list[tuple[np.ndarray, int] | Exception]:
        """Each job (HxWx3 uint8 pixels, scale, monotonic deadline) enlarged, or why not (SRUnavailable, SRTimeout,
        ValueError): one job's failure is its own. All valid jobs are queued before any is waited for."""
        outcomes: list[tuple[np.ndarray, int] | Exception | _Job] = []
        for pixels, scale, deadline in jobs:
            if scale not in self._checkpoints:
                outcomes.append(SRUnavailable(self.unavailable_reason(scale)))
            elif pixels.ndim != 3 or pixels.shape[0] == 0 or pixels.shape[1] == 0:
                outcomes.append(ValueError("cannot upscale an empty image"))
            else:
                job = _Job(pixels=pixels, scale=scale, deadline=deadline)
                self._submit(job)
                outcomes.append(job)
        return [self._wait(o) if isinstance(o, _Job) else o for o in outcomes]

    def _wait(self, job: _Job) -> tuple[np.ndarray, int] | Exception:
        # Workers enforce the deadline between tiles; the margin covers tiles already running.
        wait = None if job.deadline is None else max(0.0, job.deadline - time.monotonic()) + 30.0
        try:
            job.future.result(timeout=wait)
            return assemble(job), job.tiles  # here, in the waiting thread
        except SRTimeout as exc:
            return exc
        except TimeoutError:
            return SRTimeout("super-resolution did not finish before the deadline")
        except Exception as exc:
            return exc

    def checkpoint_name(self, scale: int) -> str:
        checkpoint = self._checkpoints.get(scale)
        return checkpoint.known.file if checkpoint else "?"

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closed = True
            pending = {id(t.job): t.job for t in self._queue}
            self._queue.clear()
            self._cond.notify_all()
        for job in pending.values():
            self._fail(job, SRUnavailable("the super-resolution engine is shut down"))
        # Wait for the workers to end: a torch thread still tearing down while the interpreter exits can
        # abort the process ("terminate called without an active exception").
        for worker in self._workers:
            if worker is not threading.current_thread():
                worker.join(timeout)

    # -- queueing -----------------------------------------------------------------------------
    def _submit(self, job: _Job) -> None:
        h, w = job.pixels.shape[:2]
        tiles = [_Tile(job, ys, xs) for ys, xs in itertools.product(spans(h, self.tile, self.tile_pad),
                                                                    spans(w, self.tile, self.tile_pad))]
        job.tiles = job.pending = len(tiles)
        with self._cond:
            if self._closed:
                raise SRUnavailable("the super-resolution engine is shut down")
            if not self._workers:
                self._start_workers()
            self._queue.extend(tiles)
            self._cond.notify_all()

    def _start_workers(self) -> None:
        count = 1 if self.device != "cpu" else self.cpu_workers
        self._graphs = CudaGraphs(self.device, enabled=self.cuda_graphs)
        if self.device != "cpu" and self.switch_interval_s:  # its GPU worker waits less for the GIL (sr/graphs.py)
            sys.setswitchinterval(self.switch_interval_s)
        for i in range(count):
            worker = threading.Thread(target=self._work, name=f"toolserver-sr-{i}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def _take(self) -> list[_Tile] | None:
        """The next live tile, plus (on a GPU) queued tiles it can share a batch with: same scale and shape."""
        with self._cond:
            while True:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                first = self._queue.popleft()
                if not first.job.failed:
                    break
            batch = [first]
            if self.batches_tiles and self.max_batch > 1:
                for tile in list(self._queue):
                    if len(batch) >= self.max_batch:
                        break
                    if tile.batch_key == first.batch_key and not tile.job.failed:
                        self._queue.remove(tile)
                        batch.append(tile)
            return batch

    def _fail(self, job: _Job, exc: BaseException) -> None:
        with self._cond:
            if job.failed or job.future.done():
                return
            job.failed = True
            self.jobs_done += 1
        job.future.set_exception(exc)

    def _finish_tile(self, tile: _Tile, result: np.ndarray) -> None:
        job = tile.job
        with self._cond:
            job.parts.append((tile, result))
            job.pending -= 1
            done = job.pending == 0 and not job.failed
            if done:
                self.jobs_done += 1
        if done:
            job.future.set_result(None)

    # -- the workers --------------------------------------------------------------------------
    def _work(self) -> None:
        import torch

        if self.device == "cpu":
            torch.set_num_threads(self.threads)  # per thread under OpenMP: only this worker's passes
            lower_thread_priority(self.nice)
        while (batch := self._take()) is not None:
            now = time.monotonic()
            live = []
            for tile in batch:
                if tile.job.deadline is not None and now > tile.job.deadline:
                    self._fail(tile.job, SRTimeout("super-resolution did not finish before the deadline"))
                elif not tile.job.failed:
                    live.append(tile)
            if not live:
                continue
            try:
                results = self._forward(live[0].job.scale, [tile.window() for tile in live])
                for tile, result in zip(live, results, strict=True):
                    self._finish_tile(tile, result)
            except BaseException as exc:  # a worker must survive anything one batch does
                log.warning("super-resolution failed: %s: %s", type(exc).__name__, exc)
                for tile in live:
                    self._fail(tile.job, exc)
                if is_oom(exc):
                    self._graphs.clear()  # their memory too
                    empty_cache()

    def _network(self, scale: int) -> Any:
        with self._network_lock:  # several CPU workers share one copy of each network (read-only)
            network = self._networks.get(scale)
            if network is None:
                network = self._load(scale)
                self._networks[scale] = network
            return network

    def _load(self, scale: int) -> Any:
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
            network = network.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # torch's stubs omit it
        if self.half and self.device != "cpu":
            network = network.half()
        return network

    def _forward(self, scale: int, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Run same-shaped uint8 HxWx3 windows through the network; uint8 outputs, clamped and rounded. On CUDA a
        batch shape seen before is replayed from its captured graph (`sr/graphs.py`): the same kernels."""
        import torch

        network = self._network(scale)
        h, w = windows[0].shape[:2]
        pad_h, pad_w = max(0, MIN_INPUT_SIDE - h), max(0, MIN_INPUT_SIDE - w)

        def pipeline(tiles: Any) -> Any:  # uint8 N x H x W x 3 on the device -> uint8 N x sH x sW x 3 there
            x = tiles.permute(0, 3, 1, 2)
            x = x.half() if self.half and self.device != "cpu" else x.float()
            x = x.div_(255.0)
            if pad_h or pad_w:  # smaller than EASA's pooling needs: replicate edges, crop the output back
                x = torch.nn.functional.pad(x, (0, pad_w, 0, pad_h), mode="replicate")
            # Channels-last is 1.5x faster on the CPU; on CUDA the permuted input cost 70 ms where a contiguous one
            # took 50 (a batch of 16 tiles of 256 px, H100).
            cpu_layout = self.device == "cpu" and self.channels_last
            x = x.contiguous(memory_format=torch.channels_last if cpu_layout else torch.contiguous_format)
            y = network(x)[:, :, : h * scale, : w * scale]
            return y.float().clamp_(0.0, 1.0).mul_(255.0).round_().to(torch.uint8).permute(0, 2, 3, 1).contiguous()

        batch = torch.from_numpy(np.stack(windows))
        y = self._graphs.run((scale, len(windows), h, w), batch, pipeline)
        with torch.inference_mode():
            if y is None:
                y = pipeline(batch.to(self.device))
            # On a GPU, out of the reused pinned buffer in one copy (the worker's only one: `tiling.assemble`)
            y = y.numpy() if self.device == "cpu" else self._staging.copy_out(y).copy()
        self.batches_run += 1
        return list(y)


def _pick_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise SRUnavailable(f"device {requested!r} was requested but CUDA is not available")
    return requested

