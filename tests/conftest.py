from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import time
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
    return Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS, tmp_path], workers=2, queue_limit=64)


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


def start_server(env_extra: dict[str, str] | None = None, timeout: float = 20.0) -> LiveServer:
    port = free_port()
    env = {**os.environ, "TOOLSERVER_PORT": str(port), "TOOLSERVER_HOST": "127.0.0.1", **(env_extra or {})}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "toolserver.cli", "serve", "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stdout.read().decode()[-2000:]}")
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
