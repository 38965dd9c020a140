"""The frames the server, the zygote and its children exchange over pipes: a 4-byte big-endian length, then a
msgpack message (or, after a result that says so, a child's own message as it is)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from typing import Any

import msgpack

HEADER = struct.Struct(">I")
PIPE_BYTES = 1 << 20


def widen_pipe(fd: int) -> None:
    """A 1 MiB pipe buffer instead of 64 KiB: a 3 MB image crosses in a few reads, not fifty wake-ups, and a
    stateful worker's next cell (code only) always fits without blocking the zygote."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def read_message(fd: int) -> dict[str, Any] | None:
    """The next frame on `fd` as a message; None at its end (or for anything but a msgpack map)."""
    header = _read_exactly(fd, HEADER.size)
    payload = None if header is None else _read_exactly(fd, HEADER.unpack(header)[0])
    message = None if payload is None else msgpack.unpackb(payload, raw=False)
    return message if isinstance(message, dict) else None


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)
