"""Start and stop verl-tool's own tool server (TIGER-AI-Lab/verl-tool @ 980962b) as a subprocess.

Standard library only, so it can be imported from this project's venv as well as from the bench venv:

    from bench.verl_tool.launch import VerlToolServer
    with VerlToolServer("serve") as server:          # or "backend"
        post(server.observation_url, {...})

mode "serve":   python -m verl_tool.servers.serve --tool_type pixel_reasoner --workers_per_tool 4
                (its Pixel-Reasoner training launch: a router with 8 uvicorn workers in front of 4
                tool_server backends, because max_concurrent_requests keeps its default 1024)
mode "backend": python -m verl_tool.servers.tool_server --tool_type pixel_reasoner --workers_per_tool 4
                (one backend, as serve.py starts each of its backends)

Both get `--host 127.0.0.1 --port P` (flags of the two `main` functions, parsed by fire), run with the bench
venv's python, PYTHONPATH=<shim>:<verl-tool tree> (nothing inherited) and their cwd in a fresh temp dir: the
tool writes tmp/crop_images/<trajectory_id>/ and, on a crop error, test.json relative to cwd, and serve.py its
backends' logs to tool-server-logs/. The server is the leader of its own process group; stop() ends that
group only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BASE = ROOT / ".bench" / "verl-tool"
VENV_PYTHON = BASE / "venv" / "bin" / "python"
SRC = BASE / "src"
SHIM = HERE / "shim"
MODULES = {"serve": "verl_tool.servers.serve", "backend": "verl_tool.servers.tool_server"}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env() -> dict[str, str]:
    """The environment verl-tool's processes run with: the shim first, then its tree; nothing else on
    PYTHONPATH (this project's venv and PYTHONPATH are not inherited)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = f"{SHIM}{os.pathsep}{SRC}"
    env["PYTHONUNBUFFERED"] = "1"
    env["VIRTUAL_ENV"] = str(VENV_PYTHON.parent.parent)
    return env


def activate_shim_in_this_process() -> None:
    """For scripts run with the bench venv's python: put the shim and verl-tool's tree on sys.path and
    install the stand-ins (what PYTHONPATH=<shim>:<src> does at startup), so verl-tool's client imports."""
    for path in (str(SRC), str(SHIM)):
        if path not in sys.path:
            sys.path.insert(0, path)
    shim = sys.modules.get("sitecustomize")
    if not getattr(shim, "VERL_TOOL_SHIM", False):
        import importlib.util

        spec = importlib.util.spec_from_file_location("verl_tool_shim_sitecustomize", SHIM / "sitecustomize.py")
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)
    shim.install()


class VerlToolServer:
    def __init__(self, mode: str = "serve", *, port: int | None = None, host: str = "127.0.0.1",
                 tool_type: str = "pixel_reasoner", workers_per_tool: int = 4, extra_args: tuple[str, ...] = (),
                 python: str | os.PathLike | None = None, workdir: str | os.PathLike | None = None,
                 ready_timeout: float = 180.0, keep_workdir: bool = False):
        if mode not in MODULES:
            raise ValueError(f"mode must be one of {sorted(MODULES)}, got {mode!r}")
        self.mode, self.host = mode, host
        self.port = port or free_port(host)
        self.python = str(python or VENV_PYTHON)
        self.args = ["--tool_type", tool_type, "--workers_per_tool", str(workers_per_tool),
                     "--host", host, "--port", str(self.port), *extra_args]
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else None
        self.ready_timeout, self.keep_workdir = ready_timeout, keep_workdir
        self.proc: subprocess.Popen | None = None
        self._log = None

    # addresses
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def observation_url(self) -> str:
        return f"{self.url}/get_observation"

    @property
    def health_url(self) -> str:
        return f"{self.url}/health"

    @property
    def log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def command(self) -> list[str]:
        return [self.python, "-m", MODULES[self.mode], *self.args]

    def start(self) -> VerlToolServer:
        if not Path(self.python).exists() or not (SRC / "verl_tool").is_dir():
            raise RuntimeError("verl-tool's bench environment is missing: run bench/verl_tool/setup.sh")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"verl-tool-{self.mode}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - open while the server runs
        self.proc = subprocess.Popen(self.command, cwd=self.workdir, env=server_env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"verl-tool {self.mode} exited with {self.proc.returncode}; "
                                   f"log tail:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.health_url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"verl-tool {self.mode} not healthy after {self.ready_timeout}s; "
                           f"log tail:\n{self.log_tail()}")

    def health(self) -> tuple[int, dict]:
        with urllib.request.urlopen(self.health_url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """The server's process tree (leader first): the leader's process group, read from /proc."""
        if self.proc is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getpgid(int(entry)) == self.proc.pid:
                        found.append(int(entry))
                except (ProcessLookupError, PermissionError):
                    pass
        return sorted(found, key=lambda pid: (pid != self.proc.pid, pid))

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.proc.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the leader (serve.py shuts its backends down itself, uvicorn finishes in-flight
        requests), then to whatever is left of its process group, SIGKILL after `timeout` seconds."""
        if self.proc is not None:
            deadline = time.monotonic() + timeout
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=timeout / 2)
            if self._group_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                while self._group_alive() and time.monotonic() < deadline:
                    time.sleep(0.1)
                if self._group_alive():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_workdir and not self.keep_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> VerlToolServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # quick manual check: python bench/verl_tool/launch.py [serve|backend]
    with VerlToolServer(sys.argv[1] if len(sys.argv) > 1 else "serve") as server:
        print(server.command)
        print(server.health())
        print("pids:", server.pids())
