"""The race's toolserver sides, with the interface of the verl-tool launcher (process group, health wait, stop):
`toolserver serve` (uvicorn), and toolserver on Ray Serve on a two-node Ray cluster on this machine. Imported by
`bench.bench_race_verl_tool`, in the bench's own venv (verl-tool's client side), so it starts our servers from
this project's `.venv`."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from bench.verl_tool.launch import VerlToolServer

ROOT = Path(__file__).resolve().parents[1]

OURS = ROOT / ".venv" / "bin" / "toolserver"


class Toolserver(VerlToolServer):
    """`toolserver serve` with the interface of the verl-tool launcher (process group, health wait, stop)."""

    def __init__(self) -> None:
        super().__init__("backend", workdir=tempfile.mkdtemp(prefix="toolserver-race-"))
        self._own_workdir = True

    @property
    def command(self) -> list[str]:
        return [str(OURS), "serve", "--host", self.host, "--port", str(self.port)]

    def start(self) -> Toolserver:
        import subprocess

        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(TOOLSERVER_DATA_DIR=str(self.workdir / "data"), TOOLSERVER_LOG_LEVEL="warning")
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - open while the server runs
        self.proc = subprocess.Popen(self.command, cwd=self.workdir, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_healthy()
            self._wait_started()
        except BaseException:  # not entered: nothing else would stop it
            self.stop()
            raise
        return self

    def _wait_started(self, timeout: float = 120.0) -> None:
        """Until the start-up work in the background is done (the code sandbox's zygote imports its libraries
        and tests the host's isolation): a one-time cost of starting the server, as the 14 processes of theirs
        are, not of the rollouts measured. Its memory stays in the figures."""
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/readyz", timeout=10) as resp:
                if json.loads(resp.read()).get("sandbox", {}).get("isolation") is not None:
                    return
            time.sleep(0.2)
        raise RuntimeError("toolserver's sandbox did not start")


class ToolserverOnServe(Toolserver):
    """toolserver as a Ray Serve app on a two-node Ray cluster on this machine (bench/ray_cluster.py: two ingress
    replicas, sessions in a Redis of its own, a Chroma server), deployed from deploy/ray/toolserver.yaml. Its CPU
    and memory are those of the whole cluster: every Ray process, Redis and Chroma."""

    ingress = "haproxy"  # Serve's HAProxy ingress (RAY_SERVE_ENABLE_HA_PROXY=1, docs/deploy.md's advice) or "proxy"

    def __init__(self) -> None:
        super().__init__()
        self.ready_timeout = 600.0

    @property
    def command(self) -> list[str]:
        return [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "bench" / "ray_cluster.py"), "--port",
                str(self.port), "--models", "", "--state", "--pids", str(self.workdir / "pids"),
                *(["--haproxy"] if self.ingress == "haproxy" else []),
                *os.environ.get("TOOLSERVER_RACE_SERVE_ARGS", "").split()]

    def start(self) -> ToolserverOnServe:
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            super().start()
            deadline = time.monotonic() + 60
            while not (self.workdir / "pids").exists() and time.monotonic() < deadline:  # written at READY
                time.sleep(0.2)
        except BaseException:
            self.stop()  # the cluster's shutdown: nothing of it may outlive a failed start
            raise
        return self

    def pids(self) -> list[int]:
        listed = self.workdir / "pids"
        alive = [int(p) for p in listed.read_text().split()] if listed.exists() else []
        return [p for p in alive if Path(f"/proc/{p}").exists()]
