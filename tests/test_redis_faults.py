"""Redis stalls, kills and restarts under live servers (real processes): a session's lock never outlives its
holder by more than its lease, and every outcome a client saw matches its session exactly, with no call run
twice or lost, when the client retries.

Two replicas share one `redis-server` (append-only, fsync always). A stall is SIGSTOP … SIGCONT; a kill is
SIGKILL, then a restart from the append-only file on the same port.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import RedisServer, b64, gradient, png_bytes, start_server, stop_server
from toolserver.client import Client

LEASE_S = 2.0


@pytest.fixture
def cluster(tmp_path: Path):
    redis = RedisServer(tmp_path / "redis").start()
    env = {"TOOLSERVER_SESSION_STORE": "redis", "TOOLSERVER_REDIS_URL": redis.url,
           "TOOLSERVER_REDIS_TIMEOUT_S": "0.5", "TOOLSERVER_LOCK_LEASE_S": str(LEASE_S),
           "TOOLSERVER_CLIP_MODEL": "", "HF_HUB_OFFLINE": "1"}
    servers = [start_server({**env, "TOOLSERVER_DATA_DIR": str(tmp_path / f"data{i}")},
                            log_path=tmp_path / f"server{i}.log", log_level="info") for i in range(2)]
    yield redis, servers, tmp_path
    for server in servers:
        stop_server(server)
    if redis.proc is not None:
        if redis.proc.poll() is None:
            redis.proc.send_signal(signal.SIGCONT)
        redis.stop()


def new_session(url: str, size: tuple[int, int] = (320, 240)) -> str:
    body = {"images": [{"data": b64(png_bytes(gradient(*size)))}]}
    return httpx.post(f"{url}/v1/sessions", json=body, timeout=10).json()["session_id"]


ZOOM = {"image": "original_image", "bbox_2d": [10, 10, 200, 150]}


def timed_call(url: str, sid: str, timeout: float = 5.0) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(f"{url}/v1/sessions/{sid}/tools/zoom_in", json=ZOOM, timeout=timeout)
    return response, time.monotonic() - started


def test_a_stall_leaves_no_lock_behind(cluster):
    redis, (a, b), tmp = cluster
    sid = new_session(a.url)
    assert timed_call(a.url, sid)[0].status_code == 200
    redis.proc.send_signal(signal.SIGSTOP)
    try:  # the lock's SET is sent, Redis buffers it, the server gives up: a token nobody will release
        stalled, _ = timed_call(a.url, sid)
        assert stalled.status_code == 503, stalled.text
        time.sleep(1.0)
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    # The other replica knows nothing of the lost token: it waits at most for the lease.
    after, seconds = timed_call(b.url, sid)
    assert after.status_code == 200 and seconds < 5.0, (after.text, seconds)
    # The replica that lost the token released it as soon as Redis answered.
    again, seconds = timed_call(a.url, sid)
    assert again.status_code == 200 and seconds < 1.0, (again.text, seconds)
    info = httpx.get(f"{a.url}/v1/sessions/{sid}").json()
    assert [i["key"] for i in info["images"]] == ["original_image", "observation_1", "observation_2", "observation_3"]
    log = (tmp / "server1.log").read_text()
    assert "waits for the session's lock" in log  # b said why it waited


def test_a_kill_and_restart_from_the_append_only_file_leaves_no_lock_behind(cluster):
    redis, (a, b), _ = cluster
    sid = new_session(a.url, size=(640, 480))
    outcome: dict[str, object] = {}

    def long_call() -> None:  # SMFANet x4 on the CPU: the lock is held, and written to the AOF, when Redis dies
        body = {"image": "original_image", "scale": 4}
        outcome["r"] = httpx.post(f"{a.url}/v1/sessions/{sid}/tools/super_resolution", json=body, timeout=60)

    caller = threading.Thread(target=long_call)
    caller.start()
    time.sleep(0.3)
    redis.proc.send_signal(signal.SIGKILL)
    redis.proc.wait(5)
    redis.proc = None
    redis.start()  # same port, same append-only file: the lock comes back with its expiry
    caller.join(60)
    first = outcome["r"]
    assert isinstance(first, httpx.Response) and first.status_code in (200, 503), first
    after, seconds = timed_call(b.url, sid)
    assert after.status_code == 200 and seconds < 5.0, (after.text, seconds)
    info = httpx.get(f"{b.url}/v1/sessions/{sid}").json()
    # The long call either committed (and said so) or committed nothing.
    expected = ["original_image", "observation_1", "observation_2"] if first.status_code == 200 else [
        "original_image", "observation_1"]
    assert [i["key"] for i in info["images"]] == expected, (first.text, info["images"])


def test_calls_under_random_stalls_match_their_session_exactly(cluster):
    redis, (a, _), tmp = cluster
    sid = new_session(a.url)
    done = threading.Event()
    rng = random.Random(7)
    stalls = []

    def stall_at_random() -> None:
        while not done.is_set():
            time.sleep(rng.uniform(0.05, 0.4))
            if done.is_set():
                break
            redis.proc.send_signal(signal.SIGSTOP)
            length = rng.uniform(0.3, 1.5)  # the servers give Redis 0.5 s
            stalls.append(length)
            time.sleep(length)
            redis.proc.send_signal(signal.SIGCONT)

    staller = threading.Thread(target=stall_at_random)
    seen = []
    with Client(a.url, retries=40, backoff=0.05, max_backoff=0.5, timeout=10) as client:
        session = client.session(sid)
        staller.start()
        try:
            for _ in range(100):
                result = session.call("zoom_in", ZOOM)
                assert result.ok, result.text
                seen.append(result.images[0].key)
                time.sleep(0.03)  # calls spread over many stalls
        finally:
            done.set()
            staller.join()
        info = session.info()
        log = client.request("GET", f"/v1/sessions/{sid}/trajectory").json()
        metrics = client.request("GET", "/metrics").text
    replays = [line for line in metrics.splitlines() if line.startswith("toolserver_tool_replays_total")]
    refused = [json.loads(line).get("status") for line in (tmp / "server0.log").read_text().splitlines()
               if '"status": 503' in line]
    print(f"{len(stalls)} stalls, {len(refused)} answers 503 (retried); {replays}")
    assert len(stalls) >= 10 and len(refused) >= 5  # the stalls did hit calls
    assert seen == [f"observation_{i}" for i in range(1, 101)]  # none doubled, none skipped
    assert [i.key for i in info.images] == ["original_image", *seen]
    assert info.tool_calls == 100
    assert len(log["calls"]) == 100 and [c["keys"] for c in log["calls"]] == [[k] for k in seen], json.dumps(log)[:500]
