"""One node, all of it: `toolserver serve --workers N` runs N server processes behind one port.

One Python process is bound by its GIL and its event loop long before the node is (about 380 `zoom_in` calls/s
on a 16-core host, whatever the cores). The supervisor here binds the port once, forks N workers, and hands each
new connection to the worker with the fewest open ones (`node.handoff`; `NODE_LISTEN` names the other ways). What a
single process kept to itself is put where every worker reaches it:

- **sessions** in a node-local Redis the supervisor starts on a unix socket in the node's private directory
  (no TCP port, no persistence), unless `SESSION_STORE=redis` already names one (Redis stays the multi-node
  store). The store's fenced locks and idempotency records make a call exactly-once across processes as they
  do across replicas;
- **decoded images** once per node in shared memory (`stores.node_pixels`): a GRPO group's photograph is
  decoded by the first worker that needs it and read back by the others; with the node's own Redis, tool images
  live there too, as raw pixels written once, Redis keeping only their records (`stores.redis_node`);
- **MCP sessions and verl-tool trajectories** by name in the same store (`MCP_SESSIONS=shared`).

Workers are forked from the supervisor after it has imported the server's modules, so their code and the
libraries' read-only pages are shared with it; each builds its own app (threads, the sandbox) after the fork, so
nothing running is inherited. A worker that dies is forked again; calls that were in flight on it fail at the
client, which retries a keyed call (its idempotency key makes the retry return the recorded outcome or run it
once). SIGTERM drains every worker (each answers 503 to new calls and finishes what it has) and stops the store.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import logging
import math
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolserver.allocator import map_large_blocks
from toolserver.config import GiB, Settings
from toolserver.node.handoff import Dispatcher
from toolserver.node.services import ChildService, NodeChroma, NodeError, NodeRedis, die_with_parent

log = logging.getLogger("toolserver.node")
CRASH_WINDOW_S = 10.0  # a worker that dies this soon after its start counts towards a crash loop
CRASH_LIMIT = 5
# `--workers auto` runs one process below this many cores: measured on 2 cores, two workers served 0.31x the calls/s of
# one process (BENCHMARKS.md, "One node"), the store's per-call work costing more than the second core gives.
AUTO_MIN_CORES = 4  # that many in a row: the node stops instead of forking forever


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, bounded by a cgroup v2 CPU quota (a container's limit)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    return max(1, cores)


def plan_workers(settings: Settings) -> tuple[int, str | None]:
    """How many server processes to run, and a warning when `auto` had to settle for one."""
    n = available_cores() if settings.workers == "auto" else int(settings.workers)
    if settings.workers == "auto" and n < AUTO_MIN_CORES:
        return 1, None  # on so few cores the node's per-call cost outweighs its parallelism (docs/node.md)
    if n < 1:
        raise NodeError("--workers must be at least 1 (or auto)")
    if n == 1 or settings.session_store == "redis":
        return n, None
    if shutil.which("redis-server") is None:
        why = ("several server processes share their sessions through a node-local Redis, and `redis-server` is "
               "not on PATH (apt-get install redis-server), nor is TOOLSERVER_SESSION_STORE=redis set")
        if settings.workers == "auto":
            return 1, f"serving with one process: {why}"
        raise NodeError(f"--workers {n}: {why}")
    return n, None


def node_directory(want_bytes: int) -> Path:
    """A private directory for the node: on /dev/shm when it has room for the shared images, else the temp dir."""
    base = tempfile.gettempdir()
    with contextlib.suppress(OSError):
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= min(want_bytes, 1 * GiB) + 64 * 1024 * 1024:
            base = "/dev/shm"
    return Path(tempfile.mkdtemp(prefix="toolserver-node-", dir=base))  # 0700


def bind(host: str, port: int, mode: str) -> socket.socket:
    """The node's port. `balanced` and `shared`: one listening socket, which the supervisor accepts on (`balanced`:
    it hands each connection to the worker with the fewest, `node.handoff`) or every worker does (`shared`). With
    `reuseport` the supervisor only holds the address (bound, not listening, so the kernel hands it no connection)
    and each worker listens on a socket of its own (`listener`)."""
    reuse_port = mode == "reuseport" and hasattr(socket, "SO_REUSEPORT")
    sock = _bound(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port), reuse_port=reuse_port,
                  listen=not reuse_port)
    sock.set_inheritable(mode != "balanced")
    return sock


def listener(held: socket.socket) -> socket.socket:
    """A worker's own listening socket on the address the supervisor holds bound (`reuseport`): the kernel gives each
    connection to one worker's socket by a hash of its addresses. On one shared socket, the worker that wakes first
    takes a whole burst of connections (uvloop accepts until none is left: on 16 cores three workers took most of
    128 sessions' connections while others idled)."""
    if held.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        return held  # shared
    sock = _bound(held.family, held.getsockname(), reuse_port=True, listen=True)
    held.close()
    return sock


def _bound(family: socket.AddressFamily, address: Any, *, reuse_port: bool, listen: bool) -> socket.socket:
    """A TCP socket bound to `address` (IPv4's or IPv6's form), listening where `listen`."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    if listen:
        sock.listen(2048)
    return sock


@dataclass
class Worker:
    index: int
    pid: int
    started: float


@dataclass
class Supervisor:
    """Forks `n` workers that run `serve_worker(settings, sock, index)`, keeps them running, stops them."""

    settings: Settings
    n: int
    serve_worker: Callable[[Settings, socket.socket, int], int]
    workers: dict[int, Worker] = field(default_factory=dict)
    stopping: bool = False
    crashes: int = 0
    failed: str | None = None  # why the node stopped on its own
    dispatcher: Dispatcher | None = None  # NODE_LISTEN=balanced: hands each connection to a worker

    def fail(self, why: str) -> None:
        if self.failed is None:
            log.error("stopping the node: %s", why)
            self.failed = why
            self._on_signal(signal.SIGTERM, None)

    def run(self, sock: socket.socket, worker_settings: Settings, on_tick: Callable[[], None] = lambda: None) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        share_before_fork()
        self.dispatcher = Dispatcher(sock) if worker_settings.node_listen == "balanced" else None
        try:
            for index in range(self.n):
                self._fork(index, sock, worker_settings)
            log.info("node started", extra={"workers": self.n, "pids": [w.pid for w in self.workers.values()]})
            while self.workers:
                self._reap(sock, worker_settings)
                if not self.stopping:
                    on_tick()
                tick_ends = time.monotonic() + 0.1
                while (left := tick_ends - time.monotonic()) > 0:  # hand out connections until the next tick
                    if self.dispatcher is None:
                        time.sleep(left)
                    else:
                        self.dispatcher.serve(left)
        finally:
            if self.dispatcher is not None:
                self.dispatcher.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 1 if self.failed else 0

    def _on_signal(self, sig: int, _frame: object) -> None:
        first = not self.stopping
        self.stopping = True
        for worker in self.workers.values():  # the first signal drains; a second stops at once (uvicorn's rule)
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGTERM if first else signal.SIGINT)
        if first:
            log.info("node draining", extra={"signal": signal.Signals(sig).name})

    def _fork(self, index: int, sock: socket.socket, worker_settings: Settings) -> None:
        link = self.dispatcher.link(index) if self.dispatcher is not None else None
        gc.freeze()  # what the supervisor holds now is never collected in the worker, so its pages stay shared
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                die_with_parent()
                map_large_blocks(worker_settings.node_mmap_threshold_bytes)  # its bursts' memory goes back
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                if self.dispatcher is not None and link is not None:  # connections come over its link
                    for held in self.dispatcher.parent_ends():
                        held.close()
                    own = link
                else:
                    own = listener(sock)
                code = self.serve_worker(worker_settings.model_copy(update={"worker_index": index}), own, index)
            except BaseException:
                logging.getLogger("toolserver").exception("worker %d failed", index)
            finally:
                os._exit(code)
        if link is not None:
            link.close()  # the worker's end, in the worker alone
        self.workers[index] = Worker(index, pid, time.monotonic())

    def _reap(self, sock: socket.socket, worker_settings: Settings) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = next((w for w in self.workers.values() if w.pid == pid), None)
            if worker is None:
                continue
            del self.workers[worker.index]
            if self.dispatcher is not None:
                self.dispatcher.unlink(worker.index)
            if self.stopping:
                continue
            early = time.monotonic() - worker.started < CRASH_WINDOW_S
            self.crashes = self.crashes + 1 if early else 0
            log.warning("worker exited; starting another", extra={
                "worker": worker.index, "pid": pid, "status": os.waitstatus_to_exitcode(status)})
            if self.crashes >= CRASH_LIMIT:
                self.fail(f"workers failed {self.crashes} times in a row within {CRASH_WINDOW_S:.0f} s of their start")
                continue
            self._fork(worker.index, sock, worker_settings)


# What a worker imports after the fork, imported before it instead (their objects' pages are then shared by all
# workers rather than built in each): the node's store, MCP, the server and its protocols. A module that is not
# installed is skipped (the worker that needs it fails as it would have).
WORKER_MODULES = (
    "toolserver.api", "toolserver.mcp_server", "toolserver.api.openenv.mcp", "toolserver.integrations.mcp_handles",
    "toolserver.serving", "toolserver.stores.redis", "toolserver.stores.redis_node", "toolserver.stores.node_pixels",
    "toolserver.core.modelhosts", "redis.asyncio", "httpx", "sse_starlette", "pythonjsonlogger.json",
    "uvicorn.loops.auto", "uvicorn.loops.uvloop", "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.http.h11_impl", "trio", "uvicorn.lifespan.on", "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto", "uvicorn.protocols.websockets.websockets_sansio_impl",
    "anyio._backends._asyncio", "anyio.streams.stapled", "anyio.streams.tls", "fastapi.staticfiles",
    "fastapi.telemetry._runtime", "fastapi_offline", "PIL.features",
)


# What each process checks once, done before the fork instead: each loads compiled kernels from numba's cache and
# checks them against the library they stand in for (17 MB of the bicubic resize's, 11 MB of the sentence
# splitter's, which every worker built again for itself; docs/node.md). Pillow's `init` imports its format plugins.
WORKER_CHECKS = ("toolserver.resample:exact_here", "toolserver.validation.sentences:native_punkt", "PIL.Image:init")


def share_before_fork() -> None:
    """Import the workers' modules in the supervisor, run their one-time checks, and freeze the collector's view of
    what it holds, so that every forked worker shares those pages (measured: docs/node.md, "Memory")."""
    for name in WORKER_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for check in WORKER_CHECKS:
        module, function = check.split(":")
        try:
            getattr(importlib.import_module(module), function)()
        except Exception as exc:  # a worker runs the check again, and reports it, when a call needs it
            log.debug("%s not run before the fork: %s", check, exc)
    gc.collect()
    gc.freeze()


def worker_settings(settings: Settings, node_dir: Path, redis_url: str | None, n: int) -> Settings:
    """What each worker runs with: the node's store, shared MCP sessions, its share of the decoded cache and of
    Pillow's kept memory blocks."""
    update: dict[str, object] = {"node_dir": node_dir, "workers": 1, "mcp_sessions": "shared",
                                 "decoded_cache_bytes": max(64 * 1024 * 1024, settings.decoded_cache_bytes // n)}
    if "encode_processes" not in settings.model_fields_set:  # the workers are the node's parallel encoders
        update["encode_processes"] = 0
    if "image_blocks_kept" not in settings.model_fields_set:  # the node's kept blocks, shared out
        update["image_blocks_kept"] = max(1, settings.image_blocks_kept // n)
    if redis_url is not None:  # the node's own Redis: its tool images can live in the node's memory alone
        update.update(session_store="redis", redis_url=redis_url, node_holds_images=True)
    return settings.model_copy(update=update)


Services = Callable[[Settings], tuple[Settings, Callable[[], None], Callable[[], None]]]


def run_node(settings: Settings, n: int, serve_worker: Callable[[Settings, socket.socket, int], int],
             extra_services: Services | None = None) -> int:
    """Start the node's services, fork `n` workers on one bound port, supervise them until a signal, clean up.

    `extra_services(worker_settings) -> (settings, tick, stop)` starts what else the workers share (the model
    hosts): it returns their settings, a check run every tick (restart what died) and how to stop them."""
    from toolserver.core.modelhosts import ModelHosts
    from toolserver.core.wiring import build_sandbox
    from toolserver.sandbox.remote import SandboxHost

    directory = node_directory(settings.node_pixels_bytes)
    redis = None if settings.session_store == "redis" else NodeRedis(directory)
    # An embedded chromadb is one process's: the workers share a Chroma server over the same files instead, started
    # when a worker first needs it (a node whose calls never touch a document runs none).
    chroma = NodeChroma(settings.resolved_documents_dir() / "chroma", directory / "chroma") if (
        settings.chroma_url is None and NodeChroma.wanted()) else None
    key = secrets.token_bytes(32)
    sandbox = SandboxHost(directory, key, build_sandbox(settings).config)  # the node's one sandbox
    # The models: one host process per device (settings.model_devices), batching every worker's calls.
    hosts = None if settings.model_host_addresses() else ModelHosts(
        settings.model_copy(update={"model_host_dir": settings.model_host_dir or directory / "models"}))
    stop_extra: Callable[[], None] = lambda: None  # noqa: E731
    tick: Callable[[], None] = lambda: None  # noqa: E731
    children: list[ChildService] = [c for c in (redis, chroma) if c is not None]
    try:
        if redis is not None:
            redis.start()
        sandbox.start()
        if hosts is not None:
            hosts.start()  # once, to learn what they serve (the workers' tools are described from it)
            if settings.model_hosts_start == "first_call":
                hosts.park()
        shared = worker_settings(settings, directory, redis.url if redis else None, n).model_copy(
            update={"node_sandbox": sandbox.address, "node_key": key.hex(),
                    **({"model_hosts": ",".join(hosts.addresses)} if hosts else {})})
        if extra_services is not None:
            shared, tick, stop_extra = extra_services(shared)
        sock = bind(settings.host, settings.port, settings.node_listen)
        print(f"toolserver: {n} workers on http://{settings.host}:{sock.getsockname()[1]} (node directory "
              f"{directory})", file=sys.stderr, flush=True)

        supervisor = Supervisor(settings, n, serve_worker)

        def check() -> None:
            if chroma is not None:
                chroma.tick()
            for child in children:
                if not child.alive():
                    supervisor.fail(f"the node's {child.name} died")
            try:
                sandbox.ensure_alive()
                if hosts is not None:
                    hosts.tick()
                tick()
            except Exception as exc:  # a model host that cannot be restarted
                supervisor.fail(f"{type(exc).__name__}: {exc}")

        return supervisor.run(sock, shared, check)
    finally:
        stop_extra()
        if hosts is not None:
            hosts.stop()
        sandbox.stop()
        for child in children:
            child.stop()
        shutil.rmtree(directory, ignore_errors=True)
