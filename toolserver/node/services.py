"""The services a node's workers share, each a child process of the supervisor: a private Redis (the sessions) and,
with the `docs` extra, a Chroma server (the document vectors, which an embedded chromadb keeps to one process)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

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
        self._stderr: IO[bytes] | None = None

    def _spawn(self, argv: list[str]) -> None:
        # Its stderr goes to a file, not a pipe: nobody reads a pipe once the program runs, and a program that wrote
        # 64 KB of warnings to one would block on its next write.
        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (kept open while the program runs; closed in stop)
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._stderr,
                                        start_new_session=True, preexec_fn=die_with_parent)

    def stderr_tail(self, limit: int = 500) -> str:
        """The last `limit` characters the program wrote to its stderr."""
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - 4 * limit))
        return self._stderr.read().decode(errors="replace").strip()[-limit:]

    def _start(self, argv: list[str], ready: Callable[[], bool]) -> None:
        self._spawn(argv)
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NodeError(f"the node's {self.name} exited at start: {self.stderr_tail()}")
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
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


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
    """A Chroma server on a loopback port over the library's own store directory (the embedded client's files),
    started on the documents' first use: `tick` (every supervisor tick) starts it once a worker has asked through
    the node's `chroma/` folder (`documents.chroma.NodeChromaLink`), and writes its URL there once it answers, or why
    it could not start."""

    name = "Chroma server"

    def __init__(self, path: Path, folder: Path):
        super().__init__()
        self.path = path
        self.folder = folder
        self.port = 0
        self.ready = False
        folder.mkdir(mode=0o700)  # its presence tells the workers that the node serves one

    def tick(self) -> None:
        """Start the server when a worker has asked for it; say when it answers, or why it died at its start. A
        server that dies after it answered is the caller's to see (`alive`)."""
        folder = self.folder
        if self.ready:
            return
        if self.process is None:
            if (folder / "wanted").exists():
                self._launch(folder)
            return
        if self.process.poll() is not None:
            _write(folder / "error", f"it exited at its start: {self.stderr_tail()}")
            (folder / "wanted").unlink(missing_ok=True)
            self.process = None  # the next ask tries again
        elif self._heartbeat(timeout=0.2):
            self.ready = True
            _write(folder / "url", self.url)

    def alive(self) -> bool:
        """Whether it runs, once it has answered (before that, `tick` watches its start)."""
        return super().alive() if self.ready else True

    @staticmethod
    def wanted() -> bool:
        return importlib.util.find_spec("chromadb") is not None and _chroma_program() is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _argv(self) -> list[str]:
        program = _chroma_program()
        if program is None:
            raise NodeError("chromadb is installed without its `chroma` program; set TOOLSERVER_CHROMA_URL")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.path.mkdir(parents=True, exist_ok=True)
        return [program, "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)]

    def _launch(self, folder: Path) -> None:
        (folder / "error").unlink(missing_ok=True)  # an earlier attempt's
        try:
            self._spawn(self._argv())
        except (OSError, NodeError) as exc:
            _write(folder / "error", str(exc))
            (folder / "wanted").unlink(missing_ok=True)

    def _heartbeat(self, timeout: float = 1.0) -> bool:
        try:
            return httpx.get(f"{self.url}/api/v2/heartbeat", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False


def _write(path: Path, text: str) -> None:
    """`text` to `path`, whole or not at all for a reader (written aside, then renamed)."""
    aside = path.with_name(f".{path.name}")
    aside.write_text(text)
    aside.replace(path)


def _chroma_program() -> str | None:
    beside = Path(sys.executable).parent / "chroma"
    return str(beside) if beside.exists() else shutil.which("chroma")
