"""`toolserver serve --workers N` as a benchmark starts it: its own process group, optionally pinned to one core,
with the readings `bench_node` takes of it (CPU seconds of its processes and of its Redis, PSS and RSS summed, the
node's files on tmpfs)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.common import file_bytes, free_port, node_root

TICK = os.sysconf("SC_CLK_TCK")


class NodeServer:
    """`toolserver serve --workers N` (optionally pinned to one core with taskset) in its own process group."""

    def __init__(self, workers: int, data_dir: Path, pin_core: int | None = None, env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "toolserver.cli", "serve", "--log-level", "warning"]
        if pin_core is not None:
            argv = ["taskset", "-c", str(pin_core), *argv]
        # One process's memory store charges every session its photograph's pixels (512 sessions of 13 MP ones passed
        # the default 8 GiB and evicted sessions: 410s); the node's store has no such total. Neither is measured here.
        full = {**os.environ, "TOOLSERVER_WORKERS": str(workers), "TOOLSERVER_PORT": str(self.port),
                "TOOLSERVER_HOST": "127.0.0.1", "TOOLSERVER_DATA_DIR": str(data_dir),
                "TOOLSERVER_TOTAL_MAX_BYTES": str(2**40), **(env or {})}
        tree = os.environ.get("TOOLSERVER_BENCH_SERVER_TREE")  # another checkout's server (an A/B on one host)
        if tree:
            full["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(argv, env=full, start_new_session=True, cwd=tree or None)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited at start ({self.proc.returncode})")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200 and len(self.pids()) > workers - 1:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError("the server did not become ready")

    def pids(self) -> list[int]:
        """The server's processes: the one started, and every descendant."""
        found, frontier = [], [self.proc.pid]
        while frontier:
            pid = frontier.pop()
            found.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*") if Path(f"/proc/{pid}").exists() else []:
                try:
                    frontier += [int(c) for c in (task / "children").read_text().split()]
                except OSError:
                    continue
        return found

    def cpu_seconds(self) -> tuple[float, float]:
        """CPU seconds of the server's processes: all of them, and the node's Redis alone."""
        total = redis = 0
        for pid in self.pids():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                used = int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, IndexError):
                continue
            total += used
            redis += used if stat.split("(", 1)[1].startswith("redis") else 0
        return total / TICK, redis / TICK

    def memory(self) -> tuple[int, int]:
        """(PSS, RSS) summed over the server's processes, in bytes."""
        pss = rss = 0
        for pid in self.pids():
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
            except OSError:
                continue
        return pss, rss

    def node_files(self) -> int:
        """Bytes of the node's directory (its shared pixels, on tmpfs: memory no process's PSS counts); 0 for one
        process, which has none."""
        cmdlines = []
        for pid in self.pids():
            with contextlib.suppress(OSError):
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        root = node_root(cmdlines)
        return 0 if root is None else file_bytes(root)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
