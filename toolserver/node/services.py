"""The services a node's workers share, each a child process of the supervisor: a private Redis (the sessions) and,
with the `docs` extra, a Chroma server (the document vectors, which an embedded chromadb keeps to one process)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

START_TIMEOUT_S = 30.0


class NodeError(RuntimeError):
    """The node cannot run as asked; the text says why and how to fix it."""


def die_with_parent() -> None:
    """In a child: end when the supervisor does, even by SIGKILL (Linux's parent-death signal), so that no worker
    or store outlives it holding the port or the sessions."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ChildService:
    """A program the supervisor runs beside its workers, stopped with it."""

    name = "service"

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def _start(self, argv: list[str], ready: Callable[[], bool]) -> None:
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        start_new_session=True, preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise NodeError(f"the node's {self.name} exited at start: {err.strip()[-500:]}")
            if ready():
                return
            time.sleep(0.05)
        self.stop()
        raise NodeError(f"the node's {self.name} did not answer within {START_TIMEOUT_S:.0f} s")

    def start(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class NodeRedis(ChildService):
    """A private redis-server on a unix socket (mode 0700 directory), without persistence."""

    name = "redis-server"

    def __init__(self, directory: Path):
        super().__init__()
        self.socket = directory / "redis.sock"
        self.directory = directory

    @property
    def url(self) -> str:
        return f"unix://{self.socket}?db=0"

    def start(self) -> None:
        self._start(["redis-server", "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
                     "--save", "", "--appendonly", "no", "--dir", str(self.directory), "--loglevel", "warning"],
                    self._ping)

    def _ping(self) -> bool:
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.settimeout(1.0)
            s.connect(str(self.socket))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False


class NodeChroma(ChildService):
    """A Chroma server on a loopback port over the library's own store directory (the embedded client's files)."""

    name = "Chroma server"

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.port = 0

    @staticmethod
    def wanted() -> bool:
        return importlib.util.find_spec("chromadb") is not None and _chroma_program() is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        program = _chroma_program()
        if program is None:
            raise NodeError("chromadb is installed without its `chroma` program; set TOOLSERVER_CHROMA_URL")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.path.mkdir(parents=True, exist_ok=True)
        self._start([program, "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
                    self._heartbeat)

    def _heartbeat(self) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v2/heartbeat", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False


def _chroma_program() -> str | None:
    beside = Path(sys.executable).parent / "chroma"
    return str(beside) if beside.exists() else shutil.which("chroma")
