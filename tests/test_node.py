"""One node, all of it: `toolserver serve --workers N` (toolserver/node.py) and the node's shared images.

The multi-process tests start a real node (its supervisor, a private redis-server, the sandbox host, N forked
workers on one port) and need `redis-server`; without it they skip at once with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.conftest import PHOTOS, free_port
from toolserver.client import Client
from toolserver.config import Settings
from toolserver.models import ImageInput
from toolserver.node import NodeError, plan_workers

BRIDGE = PHOTOS / "Bridge_by_Sander_Klootwijk.jpg"
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server is not installed (apt-get install redis-server)")


# -- planning --------------------------------------------------------------------------------------------
def test_auto_settles_for_one_process_without_a_store_and_an_explicit_count_refuses(monkeypatch):
    from toolserver.node import supervisor

    monkeypatch.setattr(supervisor, "available_cores", lambda: 16)
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    n, warning = plan_workers(Settings(workers="auto"))
    assert n == 1 and warning is not None and "redis-server" in warning
    monkeypatch.setattr(shutil, "which", lambda _name: "/usr/bin/redis-server")
    assert plan_workers(Settings(workers="auto")) == (16, None)
    monkeypatch.setattr(supervisor, "available_cores", lambda: 2)
    assert plan_workers(Settings(workers="auto")) == (1, None)  # below 4 cores one process serves faster
    assert plan_workers(Settings(workers=2)) == (2, None)  # unless asked
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(NodeError, match="redis-server"):
        plan_workers(Settings(workers=4))
    assert plan_workers(Settings(workers=4, session_store="redis")) == (4, None)  # a Redis of its own: no local one
    assert plan_workers(Settings(workers=1)) == (1, None)


def test_the_command_line_takes_a_count_or_auto():
    from toolserver.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve", "--workers", "auto"]).workers == "auto"
    assert parser.parse_args(["serve", "--workers", "3", "--threads", "5"]).workers == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--workers", "many"])


# -- memory: what the workers share ------------------------------------------------------------------------
def test_each_worker_gets_its_share_of_pillow_s_kept_blocks_unless_set(tmp_path):
    from toolserver.node.supervisor import worker_settings

    assert worker_settings(Settings(), tmp_path, None, 16).image_blocks_kept == 1  # the node keeps one process's 16
    assert worker_settings(Settings(), tmp_path, None, 32).image_blocks_kept == 1  # at least 1
    assert worker_settings(Settings(), tmp_path, None, 2).image_blocks_kept == 8
    assert worker_settings(Settings(image_blocks_kept=16), tmp_path, None, 16).image_blocks_kept == 16  # as asked


WORKER_IMPORTS = """
import sys
from toolserver.node.supervisor import share_before_fork
share_before_fork()
before = set(sys.modules)
from toolserver.api import create_app
from toolserver.config import Settings
create_app(Settings(data_dir=sys.argv[1], session_store="redis", redis_url="redis://127.0.0.1:1", workers=1,
                    mcp_sessions="shared", node_holds_images=True, model_hosts=sys.argv[1] + "/host-0.sock"))
print(len(set(sys.modules) - before))
"""


def test_the_supervisor_imports_what_a_worker_imports(tmp_path):
    """The modules a worker's app imports are imported before the fork, so their pages are shared by the workers
    rather than built in each (measured: 150 MB of a worker's 210 MB PSS idle without this)."""
    out = subprocess.run([sys.executable, "-c", WORKER_IMPORTS, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) < 40  # 3 here; 322 when a worker imported them itself


ARENAS = "from toolserver.allocator import limit_malloc_arenas; print(limit_malloc_arenas())"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_serve_limits_malloc_arenas_unless_the_environment_does():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    assert subprocess.run([sys.executable, "-c", ARENAS], capture_output=True, text=True, env=env,
                          timeout=60).stdout.strip() == "True"
    assert subprocess.run([sys.executable, "-c", ARENAS], capture_output=True, text=True, timeout=60,
                          env={**env, "MALLOC_ARENA_MAX": "4"}).stdout.strip() == "False"


LARGE = """
import sys
from toolserver.allocator import map_large_blocks
print(map_large_blocks(int(sys.argv[1])))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_worker_maps_large_blocks_only_when_asked_and_the_environment_does_not():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}

    def run(threshold: int, **extra: str) -> str:
        return subprocess.run([sys.executable, "-c", LARGE, str(threshold)], capture_output=True, text=True,
                              env={**env, **extra}, timeout=60).stdout.strip()

    assert run(1 << 20) == "True"
    assert run(0) == "False"  # glibc's own threshold, as it moves
    assert run(1 << 20, MALLOC_MMAP_THRESHOLD_="4194304") == "False"
    assert Settings().node_mmap_threshold_bytes == 1 << 20  # a node's workers map blocks of 1 MiB or more


CHECKS = """
from PIL import Image
from toolserver import resample
from toolserver.node.supervisor import share_before_fork
from toolserver.validation import sentences
share_before_fork()
print(resample._checked is not None, sentences._checked, Image._initialized)
"""


def test_the_supervisor_runs_the_workers_one_time_checks_before_the_fork():
    """The bicubic resize's and the sentence splitter's kernels, loaded and checked, and Pillow's format plugins,
    are the supervisor's pages, shared by every worker (each worker built its own: 69 MB private a worker idle
    before, 18-23 MB with these and the modules above shared)."""
    out = subprocess.run([sys.executable, "-c", CHECKS], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "2"]


# -- a real node -----------------------------------------------------------------------------------------
class Node:
    """`toolserver serve --workers N` in its own process group (the test can always stop all of it)."""

    def __init__(self, tmp_path: Path, workers: int, env: dict[str, str] | None = None, timeout: float = 120.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "node.log"
        full = {**os.environ, "TOOLSERVER_WORKERS": str(workers), "TOOLSERVER_PORT": str(self.port),
                "TOOLSERVER_HOST": "127.0.0.1", "TOOLSERVER_DATA_DIR": str(tmp_path / "data"),
                "TOOLSERVER_ALLOWED_ROOTS": f'["{PHOTOS}"]', "TOOLSERVER_LOG_LEVEL": "info", **(env or {})}
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "toolserver.cli", "serve"], env=full, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while len(self.worker_pids()) < workers or not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the node did not start: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            return httpx.get(self.url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def worker_pids(self) -> set[int]:
        """The supervisor's forked children (the same command line as it), not its redis or sandbox host."""
        own = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes() if self.proc.poll() is None else b""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        pids = set()
        for pid in (children.read_text().split() if children.exists() else []):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == own:
                    pids.add(int(pid))
            except OSError:
                continue
        return pids

    def model_host_pids(self) -> list[int]:
        """The node's model host processes (the supervisor's children running `toolserver.core.modelhost`)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        pids = []
        for pid in (children.read_text().split() if children.exists() else []):
            with contextlib.suppress(OSError):
                if b"toolserver.core.modelhost" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(int(pid))
        return pids

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left of the group


@pytest.fixture
def node(tmp_path):
    started = Node(tmp_path, workers=2, env={"TOOLSERVER_SANDBOX_CPU_POLICY": "nice"})
    yield started
    started.stop()


def _worker_of(response: httpx.Response) -> str:
    worker = response.headers.get("x-toolserver-worker")
    assert worker is not None, "a node's worker names itself on every answer"
    return worker


@needs_redis
@pytest.mark.slow
def test_any_worker_serves_any_call_of_a_session(node):
    with httpx.Client(base_url=node.url, timeout=120) as c:
        sid = c.post("/v1/sessions", json={"images": [{"path": str(BRIDGE)}]}).json()["session_id"]
    served: Counter[str] = Counter()
    boxes = []
    for i in range(200):  # a new connection each time: the kernel gives it to either worker
        with httpx.Client(base_url=node.url, timeout=120) as c:
            box = [10 + i, 10, 400 + i, 300]
            r = c.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": box})
            assert r.status_code == 200 and r.json()["ok"], r.text
            served[_worker_of(r)] += 1
            boxes.append(box)
        if len(served) == 2 and i >= 7:
            break
    assert set(served) == {"0", "1"}, served
    with httpx.Client(base_url=node.url, timeout=120) as c:
        trajectory = c.get(f"/v1/sessions/{sid}/trajectory").json()
        assert [call["arguments"]["bbox_2d"] for call in trajectory["calls"]] == boxes  # one log, in order
    # The photograph was decoded by one worker and read from the node's copy by the other.
    stores = {}
    for _ in range(200):
        with httpx.Client(base_url=node.url, timeout=120) as c:
            r = c.get("/readyz")
            stores[_worker_of(r)] = r.json()["session_store"]
        if len(stores) == 2:
            break
    assert sum(s["node_pixels_hits"] for s in stores.values()) >= 1, stores
    with httpx.Client(base_url=node.url, timeout=120) as c:
        ready = c.get("/readyz").json()
    # The models run in the node's model host (one, on this CPU), not in each worker; parked until the first model
    # call (MODEL_HOSTS_START=first_call), which starts it.
    assert "model host" in ready["super_resolution"]["served_by"], ready["super_resolution"]
    assert ready["super_resolution"]["parked"] and ready["super_resolution"]["available"]
    assert ready["sandbox"]["served_by"] == "node sandbox host"
    assert not node.model_host_pids()
    with httpx.Client(base_url=node.url, timeout=120) as c:
        r = c.post(f"/v1/sessions/{sid}/tools/super_resolution", json={"image": 0, "bbox_2d": [0, 0, 100, 100],
                                                                        "scale": 2})
    assert r.status_code == 200 and r.json()["ok"] and r.json()["meta"]["method"] == "smfanet", r.text
    assert len(node.model_host_pids()) == 1


def _workers_of_a_burst(port: int, connections: int) -> Counter[str]:
    """Open `connections` connections at once (all queued before any is used), then ask on each which worker has it."""
    import socket

    socks = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(connections)]
    served: Counter[str] = Counter()
    try:
        for sock in socks:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
        for sock in socks:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(65536)
                assert chunk, "the connection closed before its answer"
                head += chunk
            lines = head.split(b"\r\n\r\n")[0].decode().lower().split("\r\n")
            served[next(line.split(":", 1)[1].strip() for line in lines if line.startswith("x-toolserver-worker"))] += 1
    finally:
        for sock in socks:
            sock.close()
    return served


@needs_redis
@pytest.mark.slow
def test_a_burst_of_connections_is_spread_over_the_workers(node):
    """A trainer opens its sessions' connections at once. The supervisor accepts each on the node's one listening
    socket and hands it to the worker with the fewest open (NODE_LISTEN=balanced), so a burst is split exactly; a
    shared socket let the first worker to wake take nearly all, SO_REUSEPORT's hash left some with twice others'."""
    listening = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    ours = [row for row in listening if row[3] == "0A" and int(row[1].split(":")[1], 16) == node.port]
    assert len(ours) == 1, ours  # the supervisor's
    for _ in range(2):  # and again once the first burst's connections have closed
        served = _workers_of_a_burst(node.port, 64)
        assert served == {"0": 32, "1": 32}, served
        time.sleep(0.5)


@needs_redis
@pytest.mark.slow
def test_a_code_session_keeps_its_state_whichever_worker_runs_its_cells(node):
    with httpx.Client(base_url=node.url, timeout=120) as c:
        sid = c.post("/v1/sessions", json={"profile": "pyvision-rl", "images": [{"path": str(BRIDGE)}]}
                     ).json()["session_id"]
    served = set()
    texts = []
    for code in ["x = 40", "x += 1", "x += 1", "x += 1", "print(x * 2, image_clue_0.size)"]:
        with httpx.Client(base_url=node.url, timeout=120) as c:
            r = c.post(f"/v1/sessions/{sid}/tools/python", json={"code": code})
            assert r.status_code == 200 and r.json()["ok"], r.text
            served.add(_worker_of(r))
            texts.append(r.json()["text"])
    assert "86 (4352, 2448)" in texts[-1]


@needs_redis
@pytest.mark.slow
def test_a_worker_killed_mid_trajectory_loses_and_doubles_nothing(node):
    pids = node.worker_pids()
    assert len(pids) == 2
    n_calls = 40
    results: list[bool] = []
    errors: list[BaseException] = []
    with Client(node.url, retries=30, backoff=0.1, max_backoff=1.0, timeout=120) as client:
        session = client.create_session([ImageInput(path=str(BRIDGE))])

        def trajectory() -> None:
            try:
                for i in range(n_calls):  # each call keyed: a retry returns the recorded outcome or runs it once
                    out = session.call("zoom_in", image=0, bbox_2d=[i, i, 800 + i, 600 + i],
                                       idempotency_key=f"call-{i}")
                    results.append(out.ok)
            except BaseException as exc:
                errors.append(exc)

        runner = threading.Thread(target=trajectory)
        runner.start()
        while len(results) < 5 and runner.is_alive():
            time.sleep(0.01)
        victim = sorted(pids)[0]
        os.kill(victim, signal.SIGKILL)
        runner.join(600)
        assert not errors, errors
        assert results == [True] * n_calls
        calls = httpx.get(f"{node.url}/v1/sessions/{session.id}/trajectory", timeout=60).json()["calls"]
    counted = Counter(tuple(call["arguments"]["bbox_2d"]) for call in calls)
    assert len(calls) == n_calls and set(counted.values()) == {1}, counted  # nothing lost, nothing twice
    deadline = time.monotonic() + 120
    while len(node.worker_pids()) < 2 and time.monotonic() < deadline:  # the supervisor forks another
        time.sleep(0.2)
    now = node.worker_pids()
    assert len(now) == 2 and victim not in now
    assert "worker exited; starting another" in node.log.read_text()


@needs_redis
@pytest.mark.slow
def test_sigterm_stops_every_process_of_the_node_and_removes_its_directory(tmp_path):
    started = Node(tmp_path, workers=2)
    directory = next(line.split("node directory ")[1].rstrip(")\n") for line in started.log.read_text().splitlines()
                     if "node directory" in line)
    pids = started.worker_pids()
    started.proc.send_signal(signal.SIGTERM)
    assert started.proc.wait(90) == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert not Path(directory).exists()
    started.stop()
