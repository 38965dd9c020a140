"""fpng in encode processes: the same bytes as in the calling thread, through the pool and through a tool call;
a pool whose worker died is replaced and no encode fails for it."""

from __future__ import annotations

import base64
import os
import signal
import time

import fpng
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS, b64, photo, png_bytes
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.encodepool import EncodePool, default_processes


def wait_for_worker(pool: EncodePool, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while pool._idle.qsize() == 0 or pool._starting:
        assert time.monotonic() < deadline, "no encode worker started"
        time.sleep(0.05)


def test_default_counts():
    assert default_processes(2) == 0 and default_processes(3) == 0
    assert default_processes(4) == 1 and default_processes(16) == 4 and default_processes(200) == 8


def test_the_pool_writes_fpngs_very_bytes_and_survives_a_dead_worker():
    img = Image.open(photo("TwoWings.jpg")).convert("RGB").crop((0, 0, 300, 200))
    raw = img.tobytes()
    expected = fpng.from_bytes(raw, 300, 200, 3)
    pool = EncodePool(1)
    try:
        assert pool.fpng(raw, 300, 200, 3) == expected  # no worker yet: it starts, and this encode runs here
        pool.start()
        wait_for_worker(pool)
        assert pool.fpng(raw, 300, 200, 3) == expected  # in the worker
        worker = pool._idle.queue[0]
        assert worker is not None and worker.process.pid != os.getpid()
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.join(5)
        assert pool.fpng(raw, 300, 200, 3) == expected  # in the calling thread this once
        assert pool.fallbacks == 1
        assert pool.fpng(raw, 300, 200, 3) == expected  # here again, while a fresh worker starts
        wait_for_worker(pool)
        assert pool._idle.queue[0] is not worker and pool._idle.queue[0].process.is_alive()
        assert pool.fpng(raw, 300, 200, 3) == expected and pool.fallbacks == 1
    finally:
        pool.close()
    assert pool.fpng(raw, 300, 200, 3) == expected  # closed: in the calling thread


def test_inline_png_bytes_are_the_same_with_and_without_encode_processes(tmp_path):
    upload = b64(png_bytes(Image.open(photo("TwoWings.jpg")).convert("RGB").resize((400, 300))))
    answers = []
    for processes in (0, 2):
        settings = Settings(data_dir=tmp_path / f"d{processes}", allowed_roots=[PHOTOS], workers=2,
                            sr_model_dir=tmp_path / "no-weights", encode_processes=processes)
        with TestClient(create_app(settings)) as http:
            assert http.app.state.core._delivery.encoders.processes == processes
            sid = http.post("/v1/sessions", json={"images": [{"data": upload}]}).json()["session_id"]
            r = http.post(f"/v1/sessions/{sid}/tools/zoom_in", json={"image": 0, "bbox_2d": [100, 100, 700, 600]})
            answers.append(base64.b64decode(r.json()["images"][0]["data"]))
            encoders = http.app.state.core._delivery.encoders
            assert (encoders._started > 0) == (processes > 0)  # the encode went through a worker process
            metrics = http.get("/metrics").text  # each stage of the delivery, timed
            assert 'toolserver_delivery_seconds_count{stage="encode"} 1.0' in metrics
            assert 'toolserver_delivery_seconds_count{stage="base64"} 1.0' in metrics
    assert answers[0] == answers[1] and answers[0].startswith(b"\x89PNG")
