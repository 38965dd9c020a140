"""An installed toolserver serves super-resolution: run with the Python of an environment where the wheel was
installed (`.ci/run` builds one outside the checkout), from a directory outside the checkout. It starts that
environment's `toolserver serve` on a spare loopback port, checks the package it imports lies in that
environment, opens a session with a photograph, calls `super_resolution` (SMFANet, from the weights inside the
package) and checks the enlarged size, then stops the server.

    venv/bin/python scripts/check_install.py --photo ../shared/data/photos/TwoWings.jpg
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def installed_package(bin_dir: Path) -> Path:
    """Where the environment's `toolserver` package is: inside the environment, never a checkout."""
    found = subprocess.run([str(bin_dir / "python"), "-c", "import toolserver; print(toolserver.__file__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    package = Path(found).parent
    if "site-packages" not in package.parts:
        sys.exit(f"toolserver is imported from {package}, not from the installed wheel")
    return package


def wait_ready(http: httpx.Client, server: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"toolserver serve exited with {server.returncode}")
        try:
            if http.get("/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    sys.exit(f"toolserver serve did not answer /healthz within {timeout_s:.0f} s")


def super_resolution(http: httpx.Client, photo: Path) -> str:
    data = base64.b64encode(photo.read_bytes()).decode()
    created = http.post("/v1/sessions", json={"images": [{"data": data}], "coords": "abs_original"})
    created.raise_for_status()
    sid = created.json()["session_id"]
    result = http.post(f"/v1/sessions/{sid}/tools/super_resolution",
                       json={"image": 0, "bbox_2d": [0, 0, 96, 64], "scale": 2}).json()
    http.delete(f"/v1/sessions/{sid}")
    if not result.get("ok"):
        sys.exit(f"super_resolution failed: {result}")
    size = (result["images"][0]["width"], result["images"][0]["height"])
    if result["meta"].get("method") != "smfanet" or size != (192, 128):
        sys.exit(f"super_resolution answered {size} by {result['meta'].get('method')}, not 192x128 by SMFANet")
    return f"super_resolution ok: 96x64 -> {size[0]}x{size[1]} by SMFANet ({result['meta'].get('checkpoint')})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photo", type=Path, required=True)
    args = parser.parse_args()
    bin_dir = Path(sys.executable).parent
    print(f"toolserver installed at {installed_package(bin_dir)}")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TOOLSERVER_SR_MODEL_DIR")}
    with tempfile.TemporaryDirectory() as data:
        env.update(TOOLSERVER_DATA_DIR=data, TOOLSERVER_LOG_LEVEL="warning", HF_HUB_OFFLINE="1")
        server = subprocess.Popen([str(bin_dir / "toolserver"), "serve", "--port", str(port)], env=env, cwd=data)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
                wait_ready(http, server)
                sr = http.get("/readyz").json()["super_resolution"]
                if not sr.get("available"):
                    sys.exit(f"the installed server has no super-resolution: {sr}")
                print(super_resolution(http, args.photo.resolve()))
        finally:
            server.terminate()
            server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
