"""The models as processes of their own on a node (`toolserver.core.modelhosts`, `toolserver.hostlink`): two CPU
model hosts share the calls of several processes, answer exactly what the in-process path answers, come back
after a kill, and a call no host answers fails in its time. Every wait is bounded; every process started is
stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.conftest import smfanet_dir
from tests.docs_helpers import build_tiny_clip
from tests.model_host_helpers import crops, digest
from toolserver.api import create_app
from toolserver.batching import BatchRule, LocalTransport
from toolserver.config import Settings
from toolserver.core.modelhosts import ModelHosts, resolve_devices
from toolserver.core.modelset import MODEL_NAMES, batch_rule, build_models
from toolserver.documents.encoder_service import EncoderFront
from toolserver.hostlink import ModelHostError, ModelHostLost, ModelHostTimeout, node_transports, wire
from toolserver.hostlink.client import MODEL_NAMES as HOST_MODEL_NAMES
from toolserver.sr.engine import SRUnavailable
from toolserver.sr.service import SRFront

pytestmark = pytest.mark.slow  # model host processes, started and killed: .ci/run's slow leg

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def settings(tmp_path_factory) -> Settings:
    clip = build_tiny_clip(tmp_path_factory.mktemp("clip"))
    return Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=smfanet_dir(), sr_cpu_workers=1,
                    clip_model=str(clip), text_model=str(clip), model_devices="cpu,cpu",
                    model_host_wait_s=60, workers=2)


@pytest.fixture(scope="module")
def hosts(settings):
    hosts = ModelHosts(settings)
    try:
        hosts.start(timeout_s=120)
        yield hosts
    finally:
        hosts.stop()
        assert all(pid is None for pid in hosts.pids())


def close(transports) -> None:
    next(iter(transports.values())).pool.close()


def test_the_devices_setting():
    assert resolve_devices("cpu") == ["cpu"]
    assert resolve_devices("cuda:0, cuda:1") == ["cuda:0", "cuda:1"] and resolve_devices("cuda") == ["cuda:0"]
    assert resolve_devices("auto") == ["cpu"]  # no CUDA device on this machine: one CPU host
    assert HOST_MODEL_NAMES == MODEL_NAMES
    with pytest.raises(ValueError):
        Settings(model_devices="gpu0")


def test_outputs_are_those_of_the_in_process_path(settings, hosts):
    remote = node_transports(settings, hosts.addresses)
    local = {name: LocalTransport(model, batch_rule(settings, name)) for name, model in build_models(settings).items()}
    images = crops(3)
    try:
        here, there = SRFront(local["smfanet"]), SRFront(remote["smfanet"])
        for a, b in zip(here.upscale_many([(c, 2) for c in images]), there.upscale_many([(c, 2) for c in images]),
                        strict=True):
            assert a.image.tobytes() == b.image.tobytes() and (a.scale, a.checkpoint, a.tiles) == (
                b.scale, b.checkpoint, b.tiles)
        assert there.scales == here.scales and there.status()["served_by"] == "model hosts (2 on this node)"
        assert {h["host"] for h in there.status()["hosts"]} == {"0/cpu", "1/cpu"}
        texts = ["a dragonfly on a leaf", "the bridge at night"]
        for role in ("clip", "text"):
            a, b = EncoderFront(role, local[role]), EncoderFront(role, remote[role])
            assert b.available and b.spec == a.spec
            np.testing.assert_array_equal(b.encode_texts(texts), a.encode_texts(texts))
        a, b = EncoderFront("clip", local["clip"]), EncoderFront("clip", remote["clip"])
        np.testing.assert_array_equal(b.encode_images(images), a.encode_images(images))
    finally:
        close(remote)
        local["smfanet"].close()


def test_two_hosts_share_the_calls_of_several_processes(settings, hosts):
    expected = {str(i): digest(SRFront(LocalTransport(build_models(settings, ("smfanet",))["smfanet"],
                                                      BatchRule())).upscale(c, 2).image)
                for i, c in enumerate(crops())}
    command = [sys.executable, "-m", "tests.model_host_helpers", ",".join(hosts.addresses), "2", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    callers = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        results = [json.loads(proc.communicate(timeout=300)[0]) for proc in callers]
    finally:
        for proc in callers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    served = [host for r in results for host in r["served"]]
    assert all(not r["errors"] for r in results) and len(served) == 8
    assert {"0/cpu", "1/cpu"} <= set(served)  # each host answered some of each process's calls
    for r in results:
        assert r["outputs"] == {k: expected[k] for k in r["outputs"]}


def test_a_killed_host_fails_its_call_in_flight_and_is_restarted(settings, hosts):
    remote = node_transports(settings, hosts.addresses[:1])  # only host 0, so that the call goes there
    front = SRFront(remote["smfanet"])
    link = remote["smfanet"].pool.links[0]
    big = crops(1, side=200)[0]
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            front.upscale(big, 4)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    try:
        caller = threading.Thread(target=call)
        caller.start()
        deadline = time.monotonic() + 30
        while link.outstanding["smfanet"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(hosts.pids()[0], signal.SIGKILL)
        caller.join(30)
        # SRFront reports it as the model being unavailable: the tool answers `sr_unavailable`, saying why
        assert not caller.is_alive() and isinstance(outcome[0], SRUnavailable)
        assert isinstance(outcome[0].__cause__, ModelHostLost) and "went away during the call" in str(outcome[0])
        both = node_transports(settings, hosts.addresses)  # meanwhile, a worker that knows both hosts goes on
        served: list[str] = []
        both["smfanet"].pool.on_served = lambda _model, host: served.append(host)
        try:
            for _ in range(3):
                assert SRFront(both["smfanet"]).upscale(crops(1)[0], 2).image.size == (80, 80)
            assert served == ["1/cpu"] * 3
        finally:
            close(both)
        restarted_from = time.monotonic()
        while not (restarted := hosts.ensure_alive()) and time.monotonic() - restarted_from < 10:
            time.sleep(0.05)  # the kill is seen once the process is reaped
        assert restarted == [0] and hosts.restarts[0] == 1
        small = crops(1)[0]
        assert front.upscale(small, 2).image.size == (80, 80)  # waits for the restarted host, then is answered
        assert link.summary("smfanet")["up"] and link.hello["pid"] == hosts.pids()[0]
    finally:
        close(remote)
        hosts.wait_ready(120)


def test_a_call_no_host_answers_fails_in_its_time(settings, hosts, tmp_path):
    wire.write_key(tmp_path)
    nowhere = node_transports(settings, [str(tmp_path / "host-0.sock")])
    started = time.monotonic()
    with pytest.raises(ModelHostTimeout, match="no model host answered in time"):
        nowhere["smfanet"].call_many([], timeout_s=0.5)
    assert issubclass(ModelHostTimeout, TimeoutError)  # which SRFront answers as SRTimeout, as tools expect
    assert time.monotonic() - started < 60  # bounded, not hung (the exact time is no business of a unit test)
    stopped = node_transports(settings, hosts.addresses[1:])
    os.kill(hosts.pids()[1], signal.SIGSTOP)  # alive, listening, answering nothing
    try:
        with pytest.raises(ModelHostTimeout):
            stopped["smfanet"].call_many([], timeout_s=1.0)
    finally:
        os.kill(hosts.pids()[1], signal.SIGCONT)
        close(stopped)
    close(nowhere)


def test_a_client_without_the_key_is_refused(hosts):
    with pytest.raises(ModelHostError, match="closed the connection during the handshake"):
        wire.connect(hosts.addresses[0], b"not the key", 5.0)
    sock, hello = wire.connect(hosts.addresses[0], wire.read_key(hosts.addresses[0]), 5.0)
    sock.close()
    assert hello["index"] == 0 and oct(os.stat(Path(hosts.addresses[0]).parent).st_mode & 0o777) == "0o700"


def test_a_worker_told_the_addresses_reports_which_host_served(settings, hosts):
    worker = settings.model_copy(update={"model_hosts": ",".join(hosts.addresses)})
    with TestClient(create_app(worker)) as client:
        from tests.conftest import png_bytes

        sid = client.post("/v1/sessions", files={"files": ("a.png", png_bytes(crops(1, side=64)[0]),
                                                           "image/png")}).json()["session_id"]
        result = client.post(f"/v1/sessions/{sid}/tools/super_resolution",
                             json={"image": "original_image", "bbox_2d": [0, 0, 1000, 1000], "scale": 2}).json()
        assert result["ok"] and result["meta"]["method"] == "smfanet"
        metrics = client.get("/metrics").text
        ready = client.get("/readyz").json()
    assert 'toolserver_model_calls_served_total{model="smfanet",served_by="' in metrics
    text = json.dumps(ready)
    assert "model hosts (2 on this node)" in text and '"0/cpu"' in text and '"1/cpu"' in text


def test_a_model_host_imports_the_models_and_not_the_server():
    """A host process holds its device's models, not a copy of the server's libraries (397 -> 230 MB of PSS a host):
    `python -m toolserver.core.modelhost` imports neither `Core` nor the stores, the tools, the sandbox or the
    document library (and through them OpenCV, scikit-learn, numba)."""
    server = ("toolserver.core.facade", "toolserver.core.wiring", "toolserver.stores", "toolserver.tools",
              "toolserver.sandbox.executor", "toolserver.documents.library", "cv2", "sklearn", "numba")
    code = ("import sys, toolserver.core.modelhost, toolserver.core.modelset\n"
            f"print(','.join(m for m in {server!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == ""
    from toolserver.core import Core  # the package's names are still there, imported when first used

    assert Core.__name__ == "Core"


def test_parked_hosts_describe_their_models_and_start_on_the_first_call(settings, tmp_path):
    """`MODEL_HOSTS_START=first_call`: after their start the hosts are stopped (no model process on a node that serves
    no model); the workers' fronts describe the models from what the hosts wrote, the same as a running host says;
    the first call asks the supervisor (here, a thread running its `tick`) and gets the in-process answer; an
    encoder's warm-up starts them too."""
    hosts = ModelHosts(settings.model_copy(update={"model_host_dir": tmp_path / "models"}), ["cpu"])
    ticking, stop = threading.Event(), threading.Event()

    def supervisor() -> None:
        while not stop.wait(0.05):
            if ticking.is_set():
                hosts.tick()

    loop = threading.Thread(target=supervisor, daemon=True)
    loop.start()
    remote = None
    try:
        hosts.start(timeout_s=120)
        running = node_transports(settings, hosts.addresses)
        live = SRFront(running["smfanet"]).status()
        close(running)
        hosts.park()
        assert hosts.pids() == [None] and hosts.parked and (tmp_path / "models" / wire.PARKED).exists()
        remote = node_transports(settings, hosts.addresses)
        front = SRFront(remote["smfanet"])
        status = front.status()
        assert status["parked"] and status["hosts"][0]["host"] == "0/cpu" and not status["hosts"][0]["up"]
        assert "pid" not in status  # the pid its host had when it wrote the description: no process now
        assert front.available and front.scales == [2, 3, 4] and status["scales"] == live["scales"]
        assert not (tmp_path / "models" / wire.WANTED).exists()  # describing started nothing
        hosts.tick()
        assert hosts.pids() == [None]  # nobody asked
        image = crops(1)[0]
        expected = SRFront(LocalTransport(build_models(settings, ("smfanet",))["smfanet"], BatchRule())).upscale(
            image, 2).image.tobytes()
        ticking.set()
        assert front.upscale(image, 2).image.tobytes() == expected
        assert hosts.pids()[0] is not None and not hosts.parked
        assert not (tmp_path / "models" / wire.PARKED).exists() and not (tmp_path / "models" / wire.WANTED).exists()
        front.refresh()
        assert "parked" not in front.status() and front.status()["hosts"][0]["up"]
        # Parked again: an encoder's warm-up (the document library's) starts them and waits for them.
        ticking.clear()
        hosts.park()
        clip = EncoderFront("clip", remote["clip"])
        assert clip.available and hosts.pids() == [None]
        ticking.set()
        clip.model()
        assert hosts.pids()[0] is not None and clip.available
    finally:
        stop.set()
        loop.join(10)
        if remote is not None:
            close(remote)
        hosts.stop()
