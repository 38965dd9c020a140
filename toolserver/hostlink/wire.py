"""The model hosts' protocol: pickled messages in length-prefixed frames over a unix socket, after a mutual HMAC
handshake.

A frame is a header (`!QI`: the pickle's length, how many out-of-band buffers follow), each buffer's length
(`!Q`), the pickle (protocol 5), then the buffers. Arrays (an image's pixels) travel out of band: written from
their own memory and read into one bytearray each, which the unpickled array then uses as its memory, so a
3 MB reply is not copied again on either side beyond the socket's own copy.

Nothing is unpickled before both ends have shown they hold the node's key: the file `authkey` (mode 0600) beside
the sockets in the runtime directory (mode 0700) that the supervisor creates. A worker finds the key from a host's
address, so the addresses are all it is told (`TOOLSERVER_MODEL_HOSTS`), never a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import secrets
import socket
import struct
from pathlib import Path
from typing import Any

KEY_FILE = "authkey"
_HEAD = struct.Struct("!QI")
_LEN = struct.Struct("!Q")
_NONCE = 32
_MAX_BUFFERS = 1 << 16


class ModelHostError(ConnectionError):
    """A model host could not be reached, or went away (a `ConnectionError`: the fronts report the model as
    unavailable)."""


class ModelHostLost(ModelHostError):
    """The host serving a call went away (killed, restarted) before it answered."""


class ModelHostTimeout(ModelHostError, TimeoutError):
    """No model host answered within the call's timeout (a `TimeoutError`, as a model that took too long)."""


class ModelHostFailed(RuntimeError):
    """The host answered that the model raised (the error's type and message)."""


def write_key(directory: Path) -> bytes:
    """A fresh key for the hosts of `directory` (created 0700 by the caller), readable by this user only."""
    key = secrets.token_bytes(32)
    path = directory / KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def read_key(address: str) -> bytes:
    """The key of the host listening at `address` (the file beside its socket)."""
    path = Path(address).parent / KEY_FILE
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelHostError(f"cannot read the model hosts' key {path}: {exc}") from exc


# Hosts that start on a node's first model call (`MODEL_HOSTS_START=first_call`): the supervisor leaves `parked` in
# the runtime directory while they are stopped, a worker that needs them leaves `wanted`, and the supervisor removes
# both once the hosts it started answer. What each host serves, written by the host at its start, stands in for
# its answers meanwhile (`described_path`).
PARKED = "parked"
WANTED = "wanted"


def described_path(address: str) -> Path:
    """Where the host listening at `address` writes what its models serve (each model's `describe`)."""
    return Path(address).with_suffix(".described.json")


def write_described(address: str, described: dict[str, Any]) -> None:
    """Each model's description, written aside and renamed (a reader sees it whole or not at all)."""
    path = described_path(address)
    aside = path.with_name(f".{path.name}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(described, f)
    aside.replace(path)


def read_described(address: str) -> dict[str, Any] | None:
    """What the host at `address` wrote at its last start, or None."""
    try:
        return dict(json.loads(described_path(address).read_text()))
    except (OSError, ValueError):
        return None


def send(sock: socket.socket, message: Any) -> None:
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sock.sendall(b"".join([_HEAD.pack(len(head), len(raws)), *(_LEN.pack(r.nbytes) for r in raws), head]))
    for raw in raws:
        sock.sendall(raw)


def recv(sock: socket.socket) -> Any:
    """The next message; EOFError when the other end closed the connection."""
    head_len, count = _HEAD.unpack(_exact(sock, _HEAD.size))
    if count > _MAX_BUFFERS:
        raise ModelHostError(f"a frame announced {count} buffers")
    sizes = [_LEN.unpack(_exact(sock, _LEN.size))[0] for _ in range(count)]
    head = _exact(sock, head_len)
    buffers = [_exact(sock, size) for size in sizes]
    return pickle.loads(head, buffers=buffers)


def _exact(sock: socket.socket, size: int) -> bytearray:
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise EOFError("the connection was closed")
        got += n
    return data


def _mac(key: bytes, side: bytes, nonce: bytes) -> bytes:
    return hmac.new(key, side + nonce, hashlib.sha256).digest()


def serve_handshake(sock: socket.socket, key: bytes, hello: dict[str, Any]) -> None:
    """The host's side: the client proves it holds the key, then the host does, then says who it is."""
    nonce = secrets.token_bytes(_NONCE)
    sock.sendall(nonce)
    answer = _exact(sock, 32 + _NONCE)
    if not hmac.compare_digest(bytes(answer[:32]), _mac(key, b"client", nonce)):
        raise ModelHostError("a client failed the model host's handshake")
    sock.sendall(_mac(key, b"host", bytes(answer[32:])))
    send(sock, hello)


def connect(address: str, key: bytes, timeout_s: float) -> tuple[socket.socket, dict[str, Any]]:
    """A connection to the host at `address`, authenticated both ways, and the host's hello; every step is bounded
    by `timeout_s` (a host that is stopped, or a stale socket, fails fast)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, timeout_s))
        sock.connect(address)
        nonce = bytes(_exact(sock, _NONCE))
        mine = secrets.token_bytes(_NONCE)
        sock.sendall(_mac(key, b"client", nonce) + mine)
        if not hmac.compare_digest(bytes(_exact(sock, 32)), _mac(key, b"host", mine)):
            raise ModelHostError(f"the model host at {address} does not hold this node's key")
        hello = recv(sock)
        sock.settimeout(None)
        return sock, dict(hello)
    except EOFError as exc:
        sock.close()
        raise ModelHostError(f"the model host at {address} closed the connection during the handshake (a key "
                             "other than this node's?)") from exc
    except BaseException:
        sock.close()
        raise
