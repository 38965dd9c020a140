"""The node's model hosts, as the supervisor (the parent of the worker processes) runs them.

    hosts = ModelHosts(settings)      # the devices of settings.model_devices
    hosts.start()                     # one host process per device; returns once every one answers
    os.environ.update(hosts.env())    # TOOLSERVER_MODEL_HOSTS for the workers started after this
    ...                               # in each worker: Core(Settings()) reaches them (or node_transports)
    hosts.park()                      # (MODEL_HOSTS_START=first_call) stopped until a worker's first model call
    hosts.tick()                      # from the supervisor's loop: starts parked hosts a worker asked for,
    hosts.stop()                      # else restarts the hosts that died (`ensure_alive`)

Each host is `python -m toolserver.core.modelhost SPEC` (see that module), its socket and the node's key in a
private runtime directory (0700; the key 0600). A restarted host listens at the same address, so workers
reconnect to it without being told. Parked hosts (`toolserver.hostlink.wire.PARKED`) are started by the first
worker that needs one; until they answer, the workers describe the models from what each host wrote at its start.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import toolserver
from toolserver.config import Settings
from toolserver.hostlink import wire

log = logging.getLogger("toolserver.modelhost")
ENV_ADDRESSES = "TOOLSERVER_MODEL_HOSTS"
_SOCKET_PATH_MAX = 107  # sun_path, less its terminating NUL
# glibc's allocator in a host keeps the memory a call freed instead of handing it back and faulting it in again on
# the next call: without these, SMFANet's CPU workers in a host spent 30 % of their time in the kernel and a call
# took 1.4x its in-process time (docs/decisions.md). A value the environment already sets is kept.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(512 << 20)}


def resolve_devices(spec: str) -> list[str]:
    """`auto`: every CUDA device this host sees (else one CPU host); or the listed devices (`cuda` is `cuda:0`)."""
    spec = spec.strip().lower()
    if spec == "auto":
        return [f"cuda:{i}" for i in range(cuda_device_count())] or ["cpu"]
    devices = [d.strip() for d in spec.split(",") if d.strip()]
    if not devices:
        raise ValueError("no model devices given")
    return ["cuda:0" if d == "cuda" else d for d in devices]


def cuda_device_count(timeout_s: float = 120.0) -> int:
    """Counted in a child interpreter, so that this process (which forks the workers) never touches CUDA."""
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=timeout_s,
                              env=_child_env(), check=True)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError) as exc:
        log.warning("could not count the CUDA devices; the models run on the CPU", extra={"error": str(exc)})
        return 0


def _child_env() -> dict[str, str]:
    """This environment, with the directory `toolserver` was imported from first on the child's path."""
    env = dict(os.environ)
    root = str(Path(toolserver.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


class ModelHosts:
    """One model host process per device, started, watched and stopped from the supervisor."""

    def __init__(self, settings: Settings, devices: list[str] | None = None):
        self.settings = settings
        self.devices = list(devices) if devices is not None else resolve_devices(settings.model_devices)
        self.directory: Path | None = None
        self.restarts = [0] * len(self.devices)
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * len(self.devices)
        self._made_directory = False
        self.parked = False

    @property
    def addresses(self) -> list[str]:
        """Each host's socket address, in the order of `devices`."""
        if self.directory is None:
            raise RuntimeError("the model hosts are not started")
        return [str(self.directory / f"host-{i}.sock") for i in range(len(self.devices))]

    def env(self) -> dict[str, str]:
        """What a worker process's environment needs to reach the hosts (`Settings.model_hosts`)."""
        return {ENV_ADDRESSES: ",".join(self.addresses)}

    def pids(self) -> list[int | None]:
        return [None if p is None else p.pid for p in self._procs]

    def start(self, timeout_s: float = 300.0) -> None:
        """Start every host and wait until each answers (RuntimeError, the hosts stopped, if one does not)."""
        self._make_directory()
        try:
            for index in range(len(self.devices)):
                self._spawn(index)
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float = 300.0) -> None:
        """Wait until every host accepts an authenticated connection."""
        deadline = time.monotonic() + timeout_s
        key = self._key()
        for index, address in enumerate(self.addresses):
            while True:
                proc = self._procs[index]
                if proc is None or proc.poll() is not None:
                    code = None if proc is None else proc.returncode
                    raise RuntimeError(f"model host {index} ({self.devices[index]}) exited with {code} at start")
                try:
                    sock, _hello = wire.connect(address, key, 2.0)
                    sock.close()
                    break
                except (OSError, EOFError, wire.ModelHostError) as exc:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"model host {index} ({self.devices[index]}) did not answer within "
                                           f"{timeout_s:.0f} s: {exc}") from exc
                    time.sleep(0.05)

    def _answers(self, index: int, timeout_s: float) -> bool:
        """Whether host `index` accepts an authenticated connection now."""
        try:
            sock, _hello = wire.connect(self.addresses[index], self._key(), timeout_s)
        except (OSError, EOFError, wire.ModelHostError):
            return False
        sock.close()
        return True

    def ensure_alive(self) -> list[int]:
        """Restart each host that has died (without waiting for it to answer); the indices restarted."""
        restarted = []
        for index, proc in enumerate(self._procs):
            if proc is not None and proc.poll() is not None:
                log.warning("model host died; restarting it", extra={
                    "host": index, "device": self.devices[index], "exit_code": proc.returncode})
                self.restarts[index] += 1
                self._spawn(index)
                restarted.append(index)
        return restarted

    def park(self) -> None:
        """Stop the started hosts until a worker asks for them (`MODEL_HOSTS_START=first_call`): what each serves
        stays written beside its socket for the workers to read meanwhile, and `tick` starts them again."""
        self._terminate()
        assert self.directory is not None
        (self.directory / wire.PARKED).touch()
        self.parked = True

    def tick(self) -> None:
        """From the supervisor's loop: start parked hosts once a worker has asked (and say they are up once each
        answers), else restart each host that has died."""
        assert self.directory is not None
        if not self.parked:
            self.ensure_alive()
            return
        if not any(self._procs):
            if (self.directory / wire.WANTED).exists():
                log.info("a model call: starting the node's model hosts", extra={"devices": self.devices})
                for index in range(len(self.devices)):
                    self._spawn(index)
            return
        self.ensure_alive()  # one that died at its start is started again
        if all(self._answers(index, 0.05) for index in range(len(self.devices))):
            self.parked = False
            (self.directory / wire.PARKED).unlink(missing_ok=True)
            (self.directory / wire.WANTED).unlink(missing_ok=True)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every host, SIGKILL those still running after `grace_s`; remove the runtime directory made.
        Call it once the workers have drained: a call still in flight on a host fails (`ModelHostLost`)."""
        self._terminate(grace_s)
        if self._made_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self._made_directory = False

    def _terminate(self, grace_s: float = 10.0) -> None:
        procs = [p for p in self._procs if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._procs = [None] * len(self.devices)

    def __enter__(self) -> ModelHosts:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _make_directory(self) -> None:
        if self.settings.model_host_dir is None:
            self.directory = Path(tempfile.mkdtemp(prefix="toolserver-models-"))  # 0700
            self._made_directory = True
        else:
            self.directory = Path(self.settings.model_host_dir)
            self.directory.mkdir(parents=True, exist_ok=True)
            os.chmod(self.directory, 0o700)
        too_long = [a for a in self.addresses if len(os.fsencode(a)) > _SOCKET_PATH_MAX]
        if too_long:
            raise ValueError(f"the model host socket path {too_long[0]} is longer than a unix socket allows "
                             f"({_SOCKET_PATH_MAX} bytes): choose a shorter TOOLSERVER_MODEL_HOST_DIR")
        wire.write_key(self.directory)

    def _key(self) -> bytes:
        return wire.read_key(self.addresses[0])

    def _spawn(self, index: int) -> None:
        assert self.directory is not None
        spec: dict[str, Any] = {"index": index, "device": self.devices[index], "address": self.addresses[index],
                                "parent_pid": os.getpid(), "settings": self.settings.model_dump(mode="json")}
        path = self.directory / f"host-{index}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the settings may hold API keys
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        self._procs[index] = subprocess.Popen([sys.executable, "-m", "toolserver.core.modelhost", str(path)],
                                              env={**MALLOC_ENV, **_child_env()}, stdin=subprocess.DEVNULL,
                                              start_new_session=True)  # a terminal's ^C is for the supervisor
