"""Agent frameworks, each through its own package, against a live toolserver.

These tests run in the frameworks' own environments (`.ci/run` builds them: `requirements.txt` here for the
frameworks on MCP SDK 2, `requirements-mcp1.txt` for those that still need MCP SDK 1), which hold the frameworks
and not toolserver. The server runs from the project's main environment (`TOOLSERVER_PYTHON`, default
`.venv/bin/python`). Each test imports the documentation's snippet (docs/frameworks.md, docs/trainers.md) from
`examples/frameworks/` and runs it.

With `TOOLSERVER_FRAMEWORKS=required` (as in CI) a framework that is not installed fails its test instead of
skipping it, so a broken environment cannot pass quietly.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import importlib.util
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = ROOT / "examples" / "frameworks"
PICTURE_SIZE = (400, 300)


def need(package: str) -> ModuleType:
    """The framework's package, or a skip (a failure where CI requires every framework)."""
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        if os.environ.get("TOOLSERVER_FRAMEWORKS") == "required":
            pytest.fail(f"{package} is not installed in this environment: {exc}")
        pytest.skip(f"{package} is not installed (see tests_frameworks/requirements*.txt)")


def snippet(name: str, folder: str = "frameworks") -> ModuleType:
    """`examples/<folder>/<name>.py`, the code the documentation shows."""
    spec = importlib.util.spec_from_file_location(f"snippet_{name}", SNIPPETS.parent / folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def picture() -> Image.Image:
    """Four coloured quadrants: a crop's colour says which part of the picture a tool returned."""
    image = Image.new("RGB", PICTURE_SIZE, (200, 30, 30))  # top left: red
    width, height = PICTURE_SIZE
    image.paste((30, 200, 30), (width // 2, 0, width, height // 2))  # top right: green
    image.paste((30, 30, 200), (0, height // 2, width // 2, height))  # bottom left: blue
    image.paste((220, 220, 220), (width // 2, height // 2, width, height))  # bottom right: grey
    return image


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def data_uri(image: Image.Image) -> str:
    return "data:image/png;base64," + base64.b64encode(png(image)).decode()


def decode(data: str | bytes) -> Image.Image:
    """An image from base64 (or a data URI) or raw bytes."""
    if isinstance(data, str):
        data = base64.b64decode(data.split(",", 1)[-1])
    return Image.open(io.BytesIO(data)).convert("RGB")


def top_left_crop(image: Image.Image) -> bool:
    """The crop of the top-left quadrant: its size and its one colour."""
    return image.size == (PICTURE_SIZE[0] // 2, PICTURE_SIZE[1] // 2) and image.getcolors() == [
        (image.width * image.height, (200, 30, 30))]


@dataclass
class Toolserver:
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def running_toolserver(tmp_path_factory: pytest.TempPathFactory, **settings: str) -> Iterator[Toolserver]:
    """`toolserver serve` from the project's environment, with `TOOLSERVER_*` settings given as keyword arguments
    (`openenv_max_episodes="64"`)."""
    python = os.environ.get("TOOLSERVER_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    port = free_port()
    env = {**os.environ, "TOOLSERVER_PORT": str(port), "TOOLSERVER_HOST": "127.0.0.1", "HF_HUB_OFFLINE": "1",
           "TOOLSERVER_WORKERS": "1",
           "TOOLSERVER_DATA_DIR": str(tmp_path_factory.mktemp("toolserver")),
           **{f"TOOLSERVER_{name.upper()}": value for name, value in settings.items()}}
    log = tmp_path_factory.mktemp("log") / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([python, "-m", "toolserver.cli", "serve", "--log-level", "warning"], cwd=ROOT,
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"toolserver did not start ({sys.executable}): {log.read_text()[-2000:]}")
        time.sleep(0.2)
    try:
        yield Toolserver(url, process)
    finally:
        process.terminate()
        process.wait(20)


@pytest.fixture(scope="session")
def toolserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Toolserver]:
    with running_toolserver(tmp_path_factory) as server:
        yield server
