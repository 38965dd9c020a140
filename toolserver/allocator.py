"""What a server process asks of glibc's malloc, where the C library is glibc (nothing elsewhere).

- `limit_malloc_arenas`: at most 2 arenas, set by `toolserver serve` before any thread (its node's forked workers
  inherit it), as the container's entrypoint already did through `MALLOC_ARENA_MAX` (which still wins). glibc gives
  each thread an arena of its own, up to 8 per core, and an arena keeps what its thread freed; with two, a
  64-client soak's memory stopped creeping (BENCHMARKS.md, "Load and soak"). Now a server started outside the
  container, and each of a node's workers, runs the same way.
- `give_back_freed_memory`: `malloc_trim(0)`, the free pages inside every arena returned to the system, which
  glibc otherwise returns only from an arena's top. The server's sweep calls it (every `SWEEP_INTERVAL_S`): a
  node's worker that had written the thumbnails of released sessions held 428 MB of PSS idle, 147 MB after a trim
  (docs/node.md, "Memory").

- `map_large_blocks`: in each of a node's workers where `NODE_MMAP_THRESHOLD_BYTES` asks, large blocks from the
  system and back to it when freed: sixteen heaps each kept what a burst of 1.3 MB request bodies had freed, at
  a price in page faults (docs/node.md).

Written by hand: each call is one line of `ctypes`, and no maintained library wraps them.
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc() -> Any:
    """The C library, once (each sweep trims through it), or None where it has no glibc malloc."""
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """At most `arenas` malloc arenas for this process and those it forks, unless `MALLOC_ARENA_MAX` is set (glibc
    has read it then); whether it was set here."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def map_large_blocks(threshold: int) -> bool:
    """Serve every block of at least `threshold` bytes from pages of its own, given back to the system when it is
    freed, unless `MALLOC_MMAP_THRESHOLD_` is set (glibc has read it then) or `threshold` is 0; whether it was set.
    glibc's default starts at 128 KiB and rises to the largest block freed so far (up to 32 MiB), after which those
    blocks come from the heap and stay with the process when freed; a fixed threshold also stops that rise."""
    libc = _libc()
    if libc is None or threshold <= 0 or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))


def give_back_freed_memory() -> bool:
    """Return the free pages of every malloc arena to the system; whether any was returned."""
    libc = _libc()
    return libc is not None and bool(libc.malloc_trim(0))
