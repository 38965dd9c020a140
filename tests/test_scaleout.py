"""The scale-out topology of docker-compose.yml, started from plain processes: a real `redis-server`, a real
Chroma server, two replicas started by deploy/entrypoint.sh with the compose file's own environment for
them, and nginx with deploy/nginx's template. Requests go through the load balancer and straight to each
replica (client-side routing), so a session made on one replica is used on the other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from string import Template

import httpx
import pytest

from tests.conftest import PHOTOS, RedisServer, b64, free_port, gradient, need_program, photo, png_bytes
from tests.docs_helpers import make_pdf
from tests.test_deploy import compose_config

ROOT = Path(__file__).resolve().parents[1]
ZOOM = {"image": "original_image", "bbox_2d": [100, 100, 600, 500]}


class Replica:
    def __init__(self, env: dict[str, str], log: Path):
        self.env, self.log = env, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Replica:
        env = {**os.environ, **self.env, "TOOLSERVER_HOST": "127.0.0.1", "TOOLSERVER_PORT": str(self.port),
               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([str(ROOT / "deploy" / "entrypoint.sh")], env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("replica did not become ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        self.proc = None


def start_nginx(directory: Path, upstreams: list[str]) -> tuple[subprocess.Popen, str]:
    nginx = need_program("nginx", "nginx-light")
    port = free_port()
    template = (ROOT / "deploy" / "nginx" / "toolserver.conf.template").read_text()
    # What the nginx image does with /etc/nginx/templates: substitute the variables that are set.
    rendered = Template(template).safe_substitute(
        UPSTREAM_SERVERS=" ".join(f"server {u} max_fails=0;" for u in upstreams), LISTEN_PORT=port)
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    (directory / "toolserver.conf").write_text(rendered)
    (directory / "nginx.conf").write_text(
        "daemon off;\nworker_processes 1;\npid nginx.pid;\nerror_log logs/error.log warn;\n"
        "events { worker_connections 512; }\n"
        "http {\n  access_log off;\n  client_body_temp_path tmp_body;\n  proxy_temp_path tmp_proxy;\n"
        "  include toolserver.conf;\n}\n")
    proc = subprocess.Popen([nginx, "-p", str(directory), "-c", "nginx.conf", "-e", "logs/error.log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError("nginx did not start")


@pytest.fixture
def topology(tmp_path: Path, chroma_server: str):
    redis = RedisServer(tmp_path / "redis").start()
    # The replicas' environment is the compose file's, with the services' addresses on this machine.
    compose_env = compose_config("docker-compose.yml", profile="scale")["services"]["replica"]["environment"]
    env = {k: v.replace("redis://redis:6379/0", redis.url).replace("http://chroma:8000", chroma_server)
           for k, v in compose_env.items()}
    env |= {"TOOLSERVER_DOCUMENTS_DIR": str(tmp_path / "documents"), "TOOLSERVER_DATA_DIR": str(tmp_path / "data"),
            "TOOLSERVER_ALLOWED_ROOTS": json.dumps([str(PHOTOS), str(tmp_path)]), "TOOLSERVER_CLIP_MODEL": "",
            "TOOLSERVER_LOG_LEVEL": "warning", "HF_HUB_OFFLINE": "1"}
    replicas = [Replica(env, tmp_path / f"replica{i}.log").start() for i in range(2)]
    nginx, lb = start_nginx(tmp_path / "nginx", [f"127.0.0.1:{r.port}" for r in replicas])
    yield {"lb": lb, "replicas": replicas, "redis": redis, "tmp": tmp_path}
    nginx.send_signal(signal.SIGQUIT)
    nginx.wait(10)
    for replica in replicas:
        replica.stop()
    redis.stop()


def test_sessions_and_documents_are_shared_across_replicas_behind_the_balancer(topology):
    lb, (a, b) = topology["lb"], topology["replicas"]
    # A session created through one replica, used through the other and through the load balancer.
    created = httpx.post(f"{a.url}/v1/sessions", json={"images": [{"path": str(photo("LadyBird.jpg"))}],
                                                         "texts": {"answer": "One. Two."}}).json()
    sid = created["session_id"]
    keys = []
    for url in [b.url, lb, a.url, lb, lb, b.url]:
        result = httpx.post(f"{url}/v1/sessions/{sid}/tools/zoom_in", json=ZOOM, timeout=60).json()
        assert result["ok"], result
        keys.append(result["images"][0]["key"])
    assert keys == [f"observation_{i}" for i in range(1, 7)]
    info_a = httpx.get(f"{a.url}/v1/sessions/{sid}").json()
    info_b = httpx.get(f"{b.url}/v1/sessions/{sid}").json()
    assert info_a["images"] == info_b["images"] and info_a["tool_calls"] == 6
    # Both replicas answered through the balancer (round robin), each with its own request id header.
    seen = {httpx.get(f"{lb}/readyz").json()["session_store"]["decoded_cache_misses"] for _ in range(4)}
    assert len(seen) == 2
    echoed = httpx.get(f"{lb}/v1/profiles", headers={"X-Request-ID": "through-the-lb"})
    assert echoed.headers["x-request-id"] == "through-the-lb"

    # A document ingested on one replica is searched on the other (pages on the shared volume, vectors in Chroma).
    pdf = make_pdf(topology["tmp"] / "manual.pdf")
    ingested = httpx.post(f"{a.url}/v1/documents?wait=true", json={"path": str(pdf)}, timeout=300)
    assert ingested.status_code == 200, ingested.text
    hit = httpx.post(f"{b.url}/v1/sessions/{sid}/tools/doc_page_retrieval_by_query",
                     json={"filename": "manual", "query": "Ctrl-L keyboard shortcuts"}, timeout=120).json()
    assert hit["ok"] and hit["meta"]["pages"][0] == 6, hit


def test_a_replica_restart_and_a_drain_lose_nothing(topology):
    lb, (a, b) = topology["lb"], topology["replicas"]
    sid = httpx.post(f"{lb}/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(800, 600)))}]}
                     ).json()["session_id"]
    assert httpx.post(f"{lb}/v1/sessions/{sid}/tools/zoom_in", json=ZOOM).json()["ok"]
    a.stop()  # SIGTERM: a graceful drain, then exit
    for _ in range(4):  # the balancer sends everything to the replica that is left
        r = httpx.post(f"{lb}/v1/sessions/{sid}/tools/zoom_in", json=ZOOM, timeout=60)
        assert r.status_code == 200 and r.json()["ok"], r.text
    a.start()  # the same port again
    result = httpx.post(f"{a.url}/v1/sessions/{sid}/tools/zoom_in", json=ZOOM).json()
    assert result["images"][0]["key"] == "observation_6"  # nothing lost, numbering continues
    b.stop()
    # nginx took the restarted replica out for `fail_timeout` (5 s) while it was down; then it serves again.
    deadline = time.monotonic() + 15
    while (status := httpx.get(f"{lb}/v1/sessions/{sid}").status_code) != 200 and time.monotonic() < deadline:
        time.sleep(0.25)
    assert status == 200
