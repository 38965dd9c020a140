"""The node's one sandbox, served to every server process of `toolserver serve --workers N`.

A code-as-tool session keeps its code's state in a stateful worker of the sandbox (its variables, its files), so
every cell of a session must reach the same zygote, whichever server process answers the call; and the sandbox's
memory budget is the host's, not one process's. So on a node one process, the *sandbox host*, owns the `Sandbox`
(its zygote, its slots and workers), and each server process holds a `RemoteSandbox` with the same methods.

The transport is the standard library's `multiprocessing.managers`: a server process with a thread per client
connection, a proxy per client thread, arguments and results pickled (an `Execution` with its PIL images), over a
unix socket in the node's private directory with an authentication key. Nothing here needs more than that.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Any

from toolserver.sandbox.executor import Execution, Sandbox, SandboxConfig, SandboxImage, SandboxUnavailable

START_TIMEOUT_S = 30.0


class SandboxService:
    """What the host serves: the `Sandbox`'s calls, its properties as methods (proxies carry methods only)."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox

    def config(self) -> SandboxConfig:
        return self.sandbox.config

    def run(self, code: str, images: Sequence[SandboxImage], kwargs: dict[str, Any]) -> Execution:
        return self.sandbox.run(code, images, **kwargs)

    def close_worker(self, worker: str) -> None:
        self.sandbox.close_worker(worker)

    def start(self) -> None:
        self.sandbox.start()

    def state(self) -> dict[str, Any]:
        return {"level": self.sandbox.level, "live": self.sandbox.live, "workers": sorted(self.sandbox.workers),
                "describe": self.sandbox.describe(), "started": self.sandbox.started}


class _Server(BaseManager):
    pass


class _Client(BaseManager):
    pass


_Client.register("sandbox")


def serve_sandbox(address: str, authkey: bytes, config: SandboxConfig, ready: Any) -> None:
    """The sandbox host's main: build the sandbox, serve it until the supervisor stops this process."""
    sandbox = Sandbox(config)
    service = SandboxService(sandbox)
    _Server.register("sandbox", callable=lambda: service)
    server = _Server(address=address, authkey=authkey).get_server()
    ready.set()
    try:
        server.serve_forever()
    finally:
        sandbox.stop()


class SandboxHost:
    """The supervisor's handle on the sandbox host process (started with `spawn`: nothing of the parent's state)."""

    def __init__(self, directory: Path, authkey: bytes, config: SandboxConfig):
        self.address = str(directory / "sandbox.sock")
        self.authkey = authkey
        self.config = config
        self.process: Any = None

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        self.process = ctx.Process(target=serve_sandbox, args=(self.address, self.authkey, self.config, ready),
                                   name="toolserver-sandbox-host", daemon=True)
        self.process.start()
        if not ready.wait(START_TIMEOUT_S):
            self.stop()
            raise SandboxUnavailable(f"the node's sandbox host did not start within {START_TIMEOUT_S:.0f} s")

    def ensure_alive(self) -> None:
        if self.process is not None and not self.process.is_alive():
            Path(self.address).unlink(missing_ok=True)
            self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.terminate()
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()


class RemoteSandbox:
    """A `Sandbox` of the node's sandbox host, with the interface the core and the tools use."""

    def __init__(self, address: str, authkey: bytes, on_execution: Callable[[str], None] | None = None):
        self.address = address
        self.authkey = authkey
        self.on_execution = on_execution
        self._local = threading.local()  # a proxy per thread: each has its own connection
        self.config: SandboxConfig = self._call(lambda s: s.config())

    def _proxy(self) -> Any:
        proxy = getattr(self._local, "proxy", None)
        if proxy is None:
            manager = _Client(address=self.address, authkey=self.authkey)
            manager.connect()
            proxy = self._local.proxy = manager.sandbox()  # type: ignore[attr-defined]
        return proxy

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        for attempt in (1, 2):  # a host restarted since this thread's last call: reconnect once
            try:
                return fn(self._proxy())
            except (OSError, EOFError) as exc:
                self._local.proxy = None
                if attempt == 2:
                    raise SandboxUnavailable(f"the node's sandbox host is unreachable ({type(exc).__name__}); "
                                             "retry shortly") from None
        raise AssertionError("unreachable")

    def run(self, code: str, images: Sequence[SandboxImage] = (), **kwargs: Any) -> Execution:
        execution: Execution = self._call(lambda s: s.run(code, list(images), kwargs))
        if self.on_execution is not None:
            self.on_execution(execution.status)
        return execution

    def close_worker(self, worker: str) -> None:
        with contextlib.suppress(SandboxUnavailable):
            self._call(lambda s: s.close_worker(worker))

    def start(self) -> None:
        self._call(lambda s: s.start())

    def stop(self) -> None:
        """The host owns the sandbox: a server process leaving stops nothing."""

    def _state(self) -> Mapping[str, Any]:
        try:
            return self._call(lambda s: s.state())
        except SandboxUnavailable as exc:
            return {"level": None, "live": 0, "workers": [], "started": False,
                    "describe": {"isolation": None, "required": self.config.min_level, "state": str(exc)}}

    @property
    def level(self) -> str | None:
        return self._state()["level"]

    @property
    def live(self) -> int:
        return int(self._state()["live"])

    @property
    def workers(self) -> set[str]:
        return set(self._state()["workers"])

    @property
    def started(self) -> bool:
        return bool(self._state()["started"])

    def describe(self) -> dict[str, Any]:
        return {**self._state()["describe"], "served_by": "node sandbox host"}
