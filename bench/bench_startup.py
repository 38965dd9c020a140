"""Start-up: seconds from launching `toolserver serve` to its first 200 on `/healthz` (heavy libraries are
imported lazily, so this is what a trainer waits for), over several starts. The figure that used to be a test's
assertion (tests/test_live_server.py); on a busy machine it is inflated, so compare runs side by side.

    .venv/bin/python -m bench.bench_startup --runs 5
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(timeout_s: float = 120.0) -> float:
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        env = {**os.environ, "TOOLSERVER_DATA_DIR": data, "TOOLSERVER_LOG_LEVEL": "warning"}
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "toolserver.cli", "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while time.monotonic() - started < timeout_s:
                if proc.poll() is not None:
                    raise SystemExit("the server exited during start-up")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                        if answer.status == 200:
                            return time.monotonic() - started
                except OSError:
                    time.sleep(0.02)
            raise SystemExit(f"no /healthz answer within {timeout_s:.0f} s")
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    runs = [one_start() for _ in range(parser.parse_args().runs)]
    print(f"start-up to /healthz over {len(runs)} starts: median {statistics.median(runs):.2f} s, "
          f"min {min(runs):.2f} s, max {max(runs):.2f} s (load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
