"""Fuzz the running server against openapi/openapi.json with schemathesis; fail on any 5xx.

Starts a real `redis-server` and `toolserver serve` (Redis sessions, an API key, SMFANet when the weights
are found) on spare loopback ports, runs every schemathesis phase (coverage, fuzzing, stateful), prints
the case count, and exits non-zero when a case got a server error, schemathesis itself failed, or the
server logged an error. Used by `.ci/run`; by hand: `.venv/bin/python scripts/fuzz_api.py --examples 100`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KEY = "fuzz-" + os.urandom(8).hex()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not start")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=100, help="schemathesis cases per operation and phase")
    parser.add_argument("--seed", type=int, default=20261122)
    args = parser.parse_args()

    redis_server = shutil.which("redis-server")
    if redis_server is None:
        print("redis-server is not installed (apt-get install redis-server)", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="toolserver-fuzz-"))
    redis_port, port = free_port(), free_port()
    redis = subprocess.Popen([redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(work)], stdout=subprocess.DEVNULL)
    weights = ROOT.parent / "shared" / "models" / "smfanet"
    env = {**os.environ, "TOOLSERVER_HOST": "127.0.0.1", "TOOLSERVER_PORT": str(port),
           "TOOLSERVER_DATA_DIR": str(work / "data"), "TOOLSERVER_SESSION_STORE": "redis",
           "TOOLSERVER_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "TOOLSERVER_API_KEYS": json.dumps([KEY]),
           "TOOLSERVER_LOG_FORMAT": "json", "TOOLSERVER_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1",
           "TOOLSERVER_WORKERS": "1",
           **({"TOOLSERVER_SR_MODEL_DIR": str(weights)} if weights.is_dir() else {})}
    log_path = work / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen([str(BIN / "toolserver"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    report = work / "schemathesis.json"
    try:
        wait_until(lambda: httpx.get(f"{url}/readyz", timeout=1).status_code == 200, "the server")
        # One worker: with several, CPython 3.11's ast module trips over itself in Hypothesis' threads.
        command = [str(BIN / "st"), "run", str(ROOT / "openapi" / "openapi.json"), "--url", url,
                   "--header", f"Authorization: Bearer {KEY}", "--checks", "not_a_server_error",
                   "--max-examples", str(args.examples), "--workers", "1", "--seed", str(args.seed),
                   "--generation-deterministic", "--no-color", "--report", "json", "--report-json-path", str(report)]
        finished = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    finally:
        server.terminate()
        server.wait(30)
        redis.terminate()
        redis.wait(10)
    print(finished.stdout[-3000:])
    result = json.loads(report.read_text())
    cases = result["test_cases"]
    server_errors = [r for r in map(json.loads, log_path.read_text().splitlines()) if r.get("level") == "ERROR"]
    print(f"schemathesis: {cases['generated']} cases over {result['operations']['tested']} operations, "
          f"{cases['with_failures']} with failures, {len(result['errors'])} schemathesis errors; "
          f"server log: {len(server_errors)} errors")
    for record in server_errors[:5]:
        print(json.dumps(record)[:2000], file=sys.stderr)
    return 0 if finished.returncode == 0 and not server_errors and cases["with_failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
