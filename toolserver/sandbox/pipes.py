"""The frames the server, the zygote and its children exchange over pipes: a 4-byte big-endian length, then a
msgpack message (or, after a result that says so, a child's own message as it is)."""

from __future__ import annotations

import contextlib
import fcntl
import struct

HEADER = struct.Struct(">I")
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer instead of 64 KiB: a 3 MB image crosses in a few reads, not fifty wake-ups, and a
    stateful worker's next cell (code only) always fits without blocking the zygote."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
