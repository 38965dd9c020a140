"""The SMFANet inference engine: tiling, small inputs, the device worker, batching, failures."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import photo, smfanet_dir
from toolserver.sr.engine import Span, SREngine, SRTimeout, SRUnavailable, _Job, _Tile, spans
from toolserver.sr.quality import psnr


@pytest.fixture(scope="module")
def lr_photo() -> Image.Image:
    return Image.open(photo("Dragonfly_by_Bolly.jpg")).convert("RGB").resize((300, 220), Image.Resampling.BICUBIC)


@pytest.fixture
def engine():
    e = SREngine(smfanet_dir())
    yield e
    e.close()


@pytest.mark.parametrize("length", [1, 7, 8, 64, 65, 100, 191, 512, 513, 1000, 4000])
@pytest.mark.parametrize("tile,pad", [(64, 8), (128, 16), (512, 16)])
def test_spans_cover_exactly_with_equal_windows(length, tile, pad):
    parts = spans(length, tile, pad)
    assert parts[0].core0 == 0 and parts[-1].core1 == length
    assert all(a.core1 == b.core0 for a, b in itertools.pairwise(parts))  # no gap, no overlap
    assert len({p.win1 - p.win0 for p in parts}) == 1  # one window size: tiles can share a batch
    for p in parts:
        assert 0 <= p.win0 <= p.core0 < p.core1 <= p.win1 <= length
        assert p.win1 - p.win0 <= max(tile, 1) or length <= tile
        # Every interior core edge has at least `pad` pixels of context on its side.
        if p.core0 > 0:
            assert p.core0 - p.win0 >= min(pad, p.core0)
        if p.core1 < length:
            assert p.win1 - p.core1 >= pad


def test_spans_rejects_a_tile_without_room_for_its_padding():
    with pytest.raises(ValueError):
        spans(100, 32, 16)


@pytest.mark.slow
def test_tiled_output_matches_whole_image(lr_photo):
    """EASA's statistics see only the tile, so tiling is not bit-exact; with context it must stay >= 50 dB."""
    whole_engine = SREngine(smfanet_dir(), tile=10_000)
    whole = np.asarray(whole_engine.upscale(lr_photo, 4).image)
    for tile, pad in [(96, 8), (160, 16)]:
        tiled_engine = SREngine(smfanet_dir(), tile=tile, tile_pad=pad)
        result = tiled_engine.upscale(lr_photo, 4)
        assert result.tiles > 4
        assert psnr(np.asarray(result.image), whole) >= 50.0, (tile, pad)
        tiled_engine.close()
    whole_engine.close()


def test_output_is_rgb_uint8_at_scale(engine, lr_photo):
    crop = lr_photo.crop((0, 0, 41, 29))
    for scale in (2, 3, 4):
        out = engine.upscale(crop, scale)
        assert out.image.mode == "RGB" and out.image.size == (41 * scale, 29 * scale)
        assert out.checkpoint == f"SMFANet_DF2K_100w_x{scale}SR.pth" and out.device == "cpu"
    grey = engine.upscale(crop.convert("L"), 2).image  # any mode is read as RGB
    assert grey.mode == "RGB" and grey.size == (82, 58)


@pytest.mark.parametrize("size", [(1, 1), (5, 13), (13, 5), (7, 7), (8, 8)])
def test_inputs_smaller_than_the_network_minimum(engine, size):
    img = Image.new("RGB", size, (200, 40, 90))
    out = engine.upscale(img, 4).image
    assert out.size == (size[0] * 4, size[1] * 4)
    # A flat colour stays (nearly) flat: the padding did not leak anything in.
    assert np.abs(np.asarray(out).astype(int) - [200, 40, 90]).max() <= 12


def test_empty_image_is_refused(engine):
    with pytest.raises(ValueError):
        engine.upscale(Image.new("RGB", (0, 5)), 2)


def test_unavailable_scales_and_weights(tmp_path: Path):
    empty = SREngine(tmp_path)
    assert not empty.available and empty.scales == []
    with pytest.raises(SRUnavailable, match="toolserver weights download"):
        empty.upscale(Image.new("RGB", (16, 16)), 4)
    status = empty.status()
    assert status["available"] is False and status["scales"] == []
    (tmp_path / "SMFANet_DF2K_100w_x2SR.pth").symlink_to(smfanet_dir() / "SMFANet_DF2K_100w_x2SR.pth")
    empty.refresh()
    assert empty.scales == [2]
    with pytest.raises(SRUnavailable, match="scale x4 is not installed; available scales: x2"):
        empty.upscale(Image.new("RGB", (16, 16)), 4)
    assert empty.upscale(Image.new("RGB", (16, 16)), 2).image.size == (32, 32)
    empty.close()


def test_prefer_plus_picks_smfanet_plus_for_x4():
    assert SREngine(smfanet_dir()).status()["checkpoints"][4] == "SMFANet_DF2K_100w_x4SR.pth"
    assert SREngine(smfanet_dir(), prefer_plus=True).status()["checkpoints"][4] == "SMFANet_plus_DF2K_100w_x4SR.pth"


def test_worker_survives_a_failing_job(engine, lr_photo, monkeypatch):
    crop = lr_photo.crop((0, 0, 32, 32))
    real = engine._forward
    calls = {"n": 0}

    def flaky(scale, windows):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated device failure")
        return real(scale, windows)

    monkeypatch.setattr(engine, "_forward", flaky)
    with pytest.raises(RuntimeError, match="simulated device failure"):
        engine.upscale(crop, 2)
    assert engine.upscale(crop, 2).image.size == (64, 64)


def test_deadline_skips_the_rest_of_the_work(lr_photo):
    engine = SREngine(smfanet_dir(), tile=64, tile_pad=8)
    with pytest.raises(SRTimeout):
        engine.upscale(lr_photo, 4, deadline=time.monotonic() - 1)
    assert engine.upscale(lr_photo.crop((0, 0, 20, 20)), 4).image.size == (80, 80)  # still serving
    engine.close()


def test_concurrent_callers_share_one_worker(engine, lr_photo):
    crops = [lr_photo.crop((i * 20, 0, i * 20 + 48, 40)) for i in range(8)]
    expected = [np.asarray(engine.upscale(c, 2).image) for c in crops]
    results: dict[int, np.ndarray] = {}

    def call(i: int) -> None:
        results[i] = np.asarray(engine.upscale(crops[i], 2).image)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        np.testing.assert_array_equal(results[i], expected[i])
    assert engine.jobs_done == 16
    workers = [t for t in threading.enumerate() if t.name.startswith("toolserver-sr-")]
    assert len(workers) >= engine.cpu_workers


def test_same_shape_tiles_are_batched_on_a_gpu(engine):
    """The batching rule (exercised without a GPU): same scale and window shape, any job, up to max_batch."""
    engine._device = "cuda"  # only the grouping is under test; nothing runs
    engine.max_batch = 3
    a, b = np.zeros((32, 32, 3), np.uint8), np.zeros((16, 32, 3), np.uint8)
    whole = Span(0, 32, 0, 32)
    jobs = [_Job(a, 4, None), _Job(a, 2, None), _Job(a, 4, None), _Job(b, 4, None), _Job(a, 4, None),
            _Job(a, 4, None)]
    tiles = [_Tile(j, Span(0, j.pixels.shape[0], 0, j.pixels.shape[0]), whole) for j in jobs]
    jobs[4].failed = True  # a failed job's tiles are skipped, never batched
    engine._queue.extend(tiles)
    assert engine._take() == [tiles[0], tiles[2], tiles[5]]
    assert list(engine._queue) == [tiles[1], tiles[3], tiles[4]]
    engine._queue.clear()


@pytest.mark.slow
def test_a_batch_equals_single_runs(engine, lr_photo):
    crops = [np.asarray(lr_photo.crop((i * 30, 10, i * 30 + 40, 50))) for i in range(3)]
    singles = [engine._forward(2, [c])[0] for c in crops]
    batched = engine._forward(2, crops)
    for single, together in zip(singles, batched, strict=True):
        # Batch items are independent; float summation order may move a value by one level.
        assert np.abs(single.astype(int) - together).max() <= 1


@pytest.mark.slow
def test_one_large_image_spreads_over_the_cpu_workers(lr_photo):
    engine = SREngine(smfanet_dir(), tile=96, tile_pad=8, cpu_workers=2)
    seen: set[str] = set()
    real = engine._forward

    def spy(scale, windows):
        seen.add(threading.current_thread().name)
        return real(scale, windows)

    engine._forward = spy  # type: ignore[method-assign]
    result = engine.upscale(lr_photo, 2)
    assert result.tiles == 12 and result.image.size == (600, 440)
    assert seen == {"toolserver-sr-0", "toolserver-sr-1"}
    engine.close()


def test_close_fails_pending_and_later_calls(lr_photo):
    engine = SREngine(smfanet_dir())
    engine.close()
    with pytest.raises(SRUnavailable, match="shut down"):
        engine.upscale(lr_photo.crop((0, 0, 16, 16)), 2)


def test_cuda_graphs_are_off_on_the_cpu_and_a_failed_capture_leaves_the_eager_path(lr_photo, caplog):
    """On the CPU nothing is captured and the interpreter's switch interval is left alone (both are for a GPU
    worker). On a device where the capture fails (here: CUDA asked of a torch without it), the shape's first
    sightings run eagerly, the capture is tried once, warns, and graphs stay off."""
    import sys

    import torch

    from toolserver.sr.graphs import CudaGraphs

    interval = sys.getswitchinterval()
    cpu = SREngine(smfanet_dir(), cuda_graphs=True, switch_interval_s=interval / 7, cpu_workers=1)
    try:
        cpu.upscale(lr_photo.crop((0, 0, 24, 24)), 4)
        assert cpu.status()["cuda_graphs"] == {"enabled": False, "graphs": 0, "captured": 0, "replayed": 0}
        assert sys.getswitchinterval() == interval
    finally:
        cpu.close()
    graphs = CudaGraphs("cuda", after=2)
    batch = torch.zeros((2, 8, 8, 3), dtype=torch.uint8)
    ran: list[object] = []

    def pipeline(tiles: torch.Tensor) -> torch.Tensor:
        ran.append(tiles)
        return tiles

    key = (4, 2, 8, 8)
    assert graphs.run(key, batch, pipeline) is None and graphs.run(key, batch, pipeline) is None  # seen, not captured
    assert graphs.enabled and not ran
    with caplog.at_level("WARNING", logger="toolserver.sr"):
        assert graphs.run(key, batch, pipeline) is None  # the third sighting tries the capture, which fails here
    assert not graphs.enabled and "CUDA graphs are off" in caplog.text
    assert graphs.run(key, batch, pipeline) is None and graphs.status()["captured"] == 0
