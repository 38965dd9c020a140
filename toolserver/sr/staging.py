"""Page-locked (pinned) host buffers for SMFANet's outputs on a GPU, and what the engine does when the GPU's memory
runs out.

A batch's uint8 output copied to ordinary (pageable) memory ran at ~1.8 GB/s on an H100 (50 MB in 28 ms); into a
pinned buffer it took 0.9 ms (BENCHMARKS.md "GPU"). Allocating pinned memory is slow (20 ms for 50 MB), so
buffers are kept per output shape, the least recently used given back past `max_bytes`. The engine's one GPU
worker uses them one batch at a time and copies the batch out (one copy) before the next, so a buffer is never
read while it is rewritten.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class PinnedStaging:
    def __init__(self, max_bytes: int = 256 * 1024 * 1024):
        self.max_bytes = max_bytes
        self._buffers: OrderedDict[tuple[int, ...], Any] = OrderedDict()

    def copy_out(self, tensor: Any) -> Any:
        """`tensor` (on the GPU) as a numpy array in a pinned buffer of its shape (valid until the next call)."""
        import torch

        shape = tuple(tensor.shape)
        buffer = self._buffers.pop(shape, None)
        if buffer is None:
            buffer = torch.empty(shape, dtype=tensor.dtype, pin_memory=True)
        self._buffers[shape] = buffer
        while len(self._buffers) > 1 and sum(b.numel() * b.element_size() for b in self._buffers.values()) \
                > self.max_bytes:
            self._buffers.popitem(last=False)
        buffer.copy_(tensor)
        return buffer.numpy()


def is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc)


def empty_cache() -> None:
    """Give the memory PyTorch's CUDA allocator holds unused back to the device (after an out-of-memory batch)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
