"""What a server process asks of glibc's malloc, where the C library is glibc (nothing elsewhere).

`limit_malloc_arenas`: at most 2 arenas, set by `toolserver serve` before any thread (its node's forked workers
inherit it), as the container's entrypoint already did through `MALLOC_ARENA_MAX` (which still wins). glibc gives
each thread an arena of its own, up to 8 per core, and an arena keeps what its thread freed; with two, a 64-client
soak's memory stopped creeping (BENCHMARKS.md, "Load and soak"). Now a server started outside the container, and
each of a node's workers, runs the same way. Written by hand: the call is one line of `ctypes`, and no maintained
library wraps it.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None)
        return libc if hasattr(libc, "mallopt") else None
    except OSError:
        return None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """At most `arenas` malloc arenas for this process and those it forks, unless `MALLOC_ARENA_MAX` is set (glibc
    has read it then); whether it was set here."""
    libc = _libc()
    if libc is None or "MALLOC_ARENA_MAX" in os.environ:
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))

