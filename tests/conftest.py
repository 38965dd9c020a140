from __future__ import annotations

import base64
import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.core import Core

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Most tests never run code: the sandbox's zygote (0.7 s of imports and a self-test) starts when one does.
os.environ.setdefault("TOOLSERVER_SANDBOX_START", "first_use")
# A server the tests start is one process unless a test asks for a node (`serve --workers N`, tests/test_node.py).
os.environ.setdefault("TOOLSERVER_WORKERS", "1")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PHOTOS = SHARED / "data" / "photos"
SMFANET_DIR = SHARED / "models" / "smfanet"


def smfanet_dir() -> Path:
    if not (SMFANET_DIR / "SMFANet_DF2K_100w_x4SR.pth").exists():
        pytest.fail(f"SMFANet checkpoints missing: {SMFANET_DIR} (the shared/ folder must sit beside the checkout)")
    return SMFANET_DIR


def photo(name: str) -> Path:
    path = PHOTOS / name
    if not path.exists():
        pytest.fail(f"test photo missing: {path} (the shared/ folder must sit beside the checkout)")
    return path


def png_bytes(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def gradient(width: int, height: int) -> Image.Image:
    """An image whose every pixel encodes its own position, so crops can be checked exactly."""
    img = Image.new("RGB", (width, height))
    img.putdata([(x % 256, y % 256, (x // 256 + 16 * (y // 256)) % 256) for y in range(height) for x in range(width)])
    return img


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS, tmp_path], workers=2, queue_limit=64,
                    sr_model_dir=tmp_path / "no-weights")  # the SR tests name the weights themselves


@pytest.fixture
def memory_settings(tmp_path: Path) -> Settings:
    """For tests of what only the in-memory store does (LRU eviction under a total budget)."""
    return Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS, tmp_path], workers=2, queue_limit=64,
                    sr_model_dir=tmp_path / "no-weights")  # the SR tests name the weights themselves


@pytest.fixture
def core(settings: Settings) -> Core:
    return Core(settings)


@pytest.fixture
def client(settings: Settings):
    with TestClient(create_app(settings)) as c:
        yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, url: str, proc: subprocess.Popen, started: float, ready: float):
        self.url = url
        self.proc = proc
        self.startup_s = ready - started


def start_server(env_extra: dict[str, str] | None = None, timeout: float = 20.0, *, port: int | None = None,
                 log_path: Path | None = None, log_level: str = "warning") -> LiveServer:
    """`toolserver serve` in its own process; its log goes to `log_path` (else a pipe read on failure)."""
    port = port or free_port()
    env = {**os.environ, "TOOLSERVER_PORT": str(port), "TOOLSERVER_HOST": "127.0.0.1", **(env_extra or {})}
    started = time.monotonic()
    log_file = open(log_path, "ab") if log_path else None  # noqa: SIM115 - the child writes it until it exits
    proc = subprocess.Popen([sys.executable, "-m", "toolserver.cli", "serve", "--log-level", log_level],
                            env=env, stdout=log_file or subprocess.PIPE, stderr=subprocess.STDOUT)
    if log_file:
        log_file.close()
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            output = log_path.read_bytes() if log_path else proc.stdout.read()
            raise RuntimeError(f"server exited: {output.decode()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=0.5).status_code == 200:
                return LiveServer(url, proc, started, time.monotonic())
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not answer /healthz")


def stop_server(server: LiveServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(10)
    except subprocess.TimeoutExpired:
        server.proc.kill()


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    server = start_server({"TOOLSERVER_DATA_DIR": str(tmp), "TOOLSERVER_ALLOWED_ROOTS": f'["{PHOTOS}"]'})
    yield server
    stop_server(server)


# -- real servers beside the service: Redis (sessions of several replicas) and Chroma (documents) ----------------
def need_program(name: str, package: str | None = None) -> str:
    """A program the test runs (a server beside the service, a renderer); CI installs them (`.ci/run`), so there it
    must exist. Elsewhere its absence skips the test at once, with the reason."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} is not installed (apt-get install {package or name})")
    return path


class RedisServer:
    """A real `redis-server` on a spare loopback port, stoppable and restartable on the same port and data."""

    def __init__(self, directory: Path, *, appendonly: bool = True):
        self.program = need_program("redis-server")
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.appendonly = appendonly
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        from toolserver.stores.redis_parts import wait_for_redis

        self.proc = subprocess.Popen(
            [self.program, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
             "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_redis(self.url)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path):
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@contextlib.contextmanager
def running_chroma(directory: Path) -> Iterator[str]:
    """A real Chroma server (`chroma run`, from the docs extra) on a spare loopback port; its URL."""
    port = free_port()
    chroma = Path(sys.executable).parent / "chroma"
    process = subprocess.Popen([str(chroma), "run", "--path", str(directory), "--host", "127.0.0.1",
                                "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail("the Chroma server did not start")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def chroma_server(tmp_path: Path):
    with running_chroma(tmp_path / "chroma-server") as url:
        yield url


class ExternalRedis:
    def __init__(self, url: str):
        self.url = url


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory):
    """One Redis for the whole run (CI's, when it started one); each test keeps to its own key prefix."""
    url = os.environ.get("TOOLSERVER_TEST_REDIS_URL")
    if url:
        from toolserver.stores.redis_parts import wait_for_redis

        wait_for_redis(url)
        yield ExternalRedis(url)
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=False).start()
    yield server
    server.stop()


_prefixes = iter(range(1_000_000))


@pytest.fixture(params=["memory", "redis"])
def settings_any_store(request, tmp_path: Path) -> Settings:
    """The service's settings with either session store: tests that take this run against both."""
    settings = Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS, tmp_path], workers=2, queue_limit=64,
                    sr_model_dir=tmp_path / "no-weights")  # the SR tests name the weights themselves
    if request.param == "redis":
        redis = request.getfixturevalue("shared_redis")
        settings = settings.model_copy(update={"session_store": "redis", "redis_url": redis.url,
                                               "redis_prefix": f"t{next(_prefixes)}"})
    return settings


# -- the default selection (README's test command) and what .ci/run adds --------------------------------------------
# A test that starts real processes beside the service through one of these fixtures (a `toolserver serve`, Redis
# or Chroma of its own, replicas behind nginx) is marked `slow`: `pytest` alone deselects it (pyproject's addopts),
# `.ci/run` runs it (`-m '(slow or browser) and not ray'`). Tests that start a process themselves, or take seconds of CPU, carry
# the mark in their own module.
PROCESS_FIXTURES = {"live_server", "redis_server", "chroma_server", "two_replicas", "servers", "grid_server",
                    "cluster", "topology", "server", "keyed_server"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def slow_cases(names, slow: set[str]) -> list:
    """Test parameters `names`, those in `slow` (seconds of CPU each) marked `slow`: .ci/run runs them."""
    names = list(names)
    assert slow <= set(names), f"no such cases: {sorted(slow - set(names))}"
    return [pytest.param(name, marks=pytest.mark.slow) if name in slow else name for name in names]
