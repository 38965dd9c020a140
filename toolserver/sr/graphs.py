"""SMFANet's forward pass replayed as a CUDA graph: one launch for the whole batch instead of one per operation
(`SR_CUDA_GRAPHS`, off by default: on the H100 host it measured even with eager passes, docs/decisions.md).

Eagerly, the GPU worker launches each of a pass's few hundred kernels with a PyTorch call that gives up the GIL and
takes it back; a captured graph launches them all with one call. Under a server's other threads each take-back
may wait, and we expected the GPU to wait with it. On the H100 host it did not: the launches run ahead of a 50 ms
batch on the GPU's queue, and what held the in-process front back was outside the pass (the pastes between
batches, and the switch interval below). Graphs stay for batches so small that launching is most of their time.

A graph is captured per batch shape (scale, tiles, height, width) once that shape has been seen `after` times
(a shape seen once, an odd-sized image's edge tile, runs eagerly and costs no capture), at most `max_graphs` of
them (the least recently used is dropped). The graphs share one memory pool: they are replayed one at a time by
the engine's one GPU worker, and each output is copied out before the next replay, so what one graph's pass
writes never overlaps a tensor another still needs; the pool holds about the largest pass's working set, not
the sum. The captured work is the engine's whole pipeline from the uint8 batch on the GPU to the uint8 output,
so the result is that of the same kernels run eagerly. Where a capture fails (a PyTorch that cannot capture a
kernel of the network), the engine warns once and runs eagerly from then on. CUDA only: on the CPU nothing is
captured.

The other lever is the interpreter's switch interval (`SR_SWITCH_INTERVAL_MS`, set by the engine when its GPU
worker starts): a thread that wants the GIL back waits up to that long for the one holding it. Python's 5 ms is
a long time for a worker that hands the GPU a 50 ms batch and needs the GIL a few times to do it; at 0.5 ms the
in-process front gave 4-5 % more on the H100 host (BENCHMARKS.md), and the process's other threads switch more
often (on 2 cores, one process's `zoom_in` calls: see BENCHMARKS.md).

Written here because PyTorch's own helpers (`torch.cuda.make_graphed_callables`) are for training (they capture the
backward pass too and take one fixed shape); `torch.compile(mode="reduce-overhead")` does this with its own
shape handling, but compiles for minutes at start on a host without a warm cache.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("toolserver.sr")

Key = tuple[int, int, int, int]  # scale, tiles, height, width


@dataclass
class _Graph:
    graph: Any  # torch.cuda.CUDAGraph
    source: Any  # the static uint8 input on the GPU
    result: Any  # the static uint8 output on the GPU


class CudaGraphs:
    """The captured graphs of one engine's GPU worker (called from that one thread only)."""

    def __init__(self, device: str, *, enabled: bool = True, after: int = 2, max_graphs: int = 16):
        self.device = device
        self.after = max(1, after)
        self.max_graphs = max(1, max_graphs)
        self.enabled = enabled and device.startswith("cuda")
        self._graphs: OrderedDict[Key, _Graph] = OrderedDict()
        self._seen: Counter[Key] = Counter()
        self._lock = threading.Lock()
        self._pool: Any = None  # torch.cuda.graph_pool_handle(), made at the first capture
        self.captured = 0
        self.replayed = 0

    def run(self, key: Key, batch: Any, pipeline: Callable[[Any], Any]) -> Any | None:
        """`pipeline(batch on the GPU)` replayed from its graph, or None where it is to be run eagerly (not
        captured yet, or graphs are off). `batch`: the uint8 tiles on the host; the output is valid until the
        next call."""
        if not self.enabled:
            return None
        with self._lock:
            found = self._graphs.get(key)
            if found is None:
                if len(self._seen) >= 4096:  # shapes that came once or twice (odd-sized crops) are not kept forever
                    self._seen.clear()
                self._seen[key] += 1
                if self._seen[key] <= self.after:
                    return None
            else:
                self._graphs.move_to_end(key)
        if found is None:
            found = self._capture(key, batch, pipeline)
            if found is None:
                return None
        found.source.copy_(batch)
        found.graph.replay()
        self.replayed += 1
        return found.result

    def _capture(self, key: Key, batch: Any, pipeline: Callable[[Any], Any]) -> _Graph | None:
        import torch

        try:
            with torch.no_grad():
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                source = torch.empty(tuple(batch.shape), dtype=batch.dtype, device=self.device)
                source.copy_(batch)
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # warm-up off the capture: kernels chosen, workspaces allocated
                    for _ in range(2):
                        pipeline(source)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                # thread_local: other threads of the process (a document encoder on the same GPU) go on using
                # CUDA while this one captures; only this thread's calls are checked
                with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                    result = pipeline(source)
        except Exception as exc:  # any capture failure leaves the eager path, which works
            log.warning("super-resolution: CUDA graphs are off (a capture of %s failed: %s: %s)", key,
                        type(exc).__name__, exc)
            self.enabled = False
            return None
        entry = _Graph(graph, source, result)
        with self._lock:
            self._graphs[key] = entry
            while len(self._graphs) > self.max_graphs:
                self._graphs.popitem(last=False)
        self.captured += 1
        return entry

    def clear(self) -> None:
        """Drop every captured graph (and the GPU memory each holds); shapes are captured again as they recur."""
        with self._lock:
            self._graphs.clear()
            self._seen.clear()

    def status(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "graphs": len(self._graphs), "captured": self.captured,
                "replayed": self.replayed}
