"""`super_resolution`, `magnify` and Mags-RL's `zoom` through the HTTP API, with the official weights."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import PHOTOS, photo, smfanet_dir
from tests.profiles.helpers import act_image, call, image_of, make_session
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.sr.quality import psnr_y


def sr_client(tmp_path: Path, model_dir: Path | None = None, **overrides):
    settings = Settings(data_dir=tmp_path / "data", allowed_roots=[PHOTOS, tmp_path], workers=2,
                        sr_model_dir=model_dir or smfanet_dir(), **overrides)
    return TestClient(create_app(settings))


@pytest.fixture
def client(tmp_path: Path):
    with sr_client(tmp_path) as c:
        yield c


@pytest.fixture(scope="module")
def scene() -> Image.Image:
    return Image.open(photo("TwoWings.jpg")).convert("RGB").resize((320, 200), Image.Resampling.BICUBIC)


def test_listing_and_readyz_say_what_is_installed(client, tmp_path):
    tools = {t["function"]["name"]: t["function"] for t in client.get("/v1/tools").json()}
    assert tools["super_resolution"]["description"].endswith("Available scales on this server: 2, 3, 4.")
    assert tools["super_resolution"]["parameters"]["properties"]["scale"]["enum"] == [2, 3, 4]
    ready = client.get("/readyz").json()
    assert ready["super_resolution"]["available"] is True and ready["super_resolution"]["scales"] == [2, 3, 4]
    with sr_client(tmp_path, tmp_path / "none") as bare:
        tools = {t["function"]["name"]: t["function"] for t in bare.get("/v1/tools").json()}
        assert "not installed on this server, so calls fail" in tools["super_resolution"]["description"]
        assert "enlarged with bicubic resizing instead" in tools["magnify"]["description"]
        r = bare.get("/readyz")
        assert r.status_code == 200 and r.json()["super_resolution"]["available"] is False
    with sr_client(tmp_path, tmp_path / "none", sr_required=True) as strict:
        r = strict.get("/readyz")
        assert r.status_code == 503 and "toolserver weights download" in r.json()["reason"]


def test_super_resolution_of_a_box(client, scene):
    sid = make_session(client, "default", scene)
    result = call(client, sid, "super_resolution", {"image": "original_image", "bbox_2d": [250, 250, 750, 750]})
    assert result["ok"], result["text"]
    meta = result["meta"]
    assert meta["box_original"] == [80, 50, 240, 150]
    assert meta["method"] == "smfanet" and meta["scale"] == 4 and meta["requested_scale"] == 4
    assert meta["checkpoint"] == "SMFANet_DF2K_100w_x4SR.pth"
    assert result["text"] == ("Enlarged `original_image` at [80, 50, 240, 150] (original pixels) x4 with SMFANet "
                              "super-resolution, 640x400 pixels. The result is image `observation_1` (index 1).")
    out = image_of(result)
    assert out.size == (640, 400)
    # It is the crop, enlarged: close to a bicubic enlargement of the same crop, not identical to it.
    bicubic = scene.crop((80, 50, 240, 150)).resize((640, 400), Image.Resampling.BICUBIC)
    assert 25 < psnr_y(out.convert("RGB"), bicubic, 4) < 60


def test_super_resolution_whole_image_at_a_chosen_scale(client, scene):
    sid = make_session(client, "default", scene)
    result = call(client, sid, "super_resolution", {"image": 0, "scale": 2})
    assert result["ok"] and result["meta"]["scale"] == 2 and image_of(result).size == (640, 400)
    assert result["meta"]["box_original"] == [0, 0, 320, 200]


def test_output_cap_lowers_the_scale_then_falls_back_to_bicubic(tmp_path, scene):
    # 320x200 = 64,000 px: x4 needs 1,024,000, x3 576,000, x2 256,000.
    with sr_client(tmp_path, sr_max_output_pixels=600_000) as c:
        sid = make_session(c, "default", scene)
        r = call(c, sid, "super_resolution", {"image": 0, "scale": 4})
        assert r["ok"] and r["meta"]["method"] == "smfanet" and r["meta"]["scale"] == 3
        assert image_of(r).size == (960, 600)
    with sr_client(tmp_path, sr_max_output_pixels=200_000) as c:
        sid = make_session(c, "default", scene)
        r = call(c, sid, "super_resolution", {"image": 0})
        assert r["ok"] and r["meta"]["method"] == "bicubic"
        assert r["meta"]["reason"] == "no installed SMFANet scale up to x4 keeps the output within 200000 pixels"
        assert r["meta"]["scale"] == pytest.approx(1.7678, abs=1e-4)  # sqrt(200000 / 64000)
        assert image_of(r).size == (566, 354)
        assert "with bicubic resizing" in r["text"]


def test_bad_inputs_give_clear_errors(client, scene):
    sid = make_session(client, "default", scene, coords="abs_original")
    cases = [
        ({"image": 0, "bbox_2d": [10, 10, 11, 11]}, "invalid_box",
         "Error: the region is 1x1 pixels of the original image; super-resolution needs at least 8x8. "
         "Give a larger region."),
        ({"image": 0, "bbox_2d": [400, 300, 500, 400]}, "invalid_box",
         "Error: bbox_2d [400.0, 300.0, 500.0, 400.0] lies outside the image `original_image`"),
        ({"image": 0, "bbox_2d": [50, 50, 10, 10]}, "invalid_box", "Error: bbox_2d must satisfy x1 < x2"),
        ({"image": 7}, "unknown_image", "Error: image index 7 is out of range"),
        ({"image": 0, "scale": 5}, "invalid_arguments", "Error: invalid arguments for super_resolution: scale:"),
    ]
    for args, code, text in cases:
        r = call(client, sid, "super_resolution", args)
        assert r["ok"] is False and r["error"]["code"] == code and r["text"].startswith(text), (args, r["text"])
    tiny = make_session(client, "default", Image.new("RGB", (5, 40)))
    r = call(client, tiny, "super_resolution", {"image": 0})
    assert r["error"]["code"] == "invalid_box" and "5x40 pixels" in r["text"]
    assert call(client, sid, "super_resolution", {"image": 0, "scale": 2})["ok"]  # the worker is fine


def test_missing_weights_and_uninstalled_scales(tmp_path, scene):
    with sr_client(tmp_path, tmp_path / "none") as c:
        sid = make_session(c, "default", scene)
        r = call(c, sid, "super_resolution", {"image": 0})
        assert r["ok"] is False and r["error"]["code"] == "sr_unavailable"
        assert r["text"].startswith("Error: super-resolution is unavailable on this server: no SMFANet checkpoint in")
        assert "toolserver weights download" in r["text"]
    partial = tmp_path / "partial"
    partial.mkdir()
    for scale in (2, 4):
        name = f"SMFANet_DF2K_100w_x{scale}SR.pth"
        (partial / name).symlink_to(smfanet_dir() / name)
    with sr_client(tmp_path, partial) as c:
        sid = make_session(c, "default", scene)
        r = call(c, sid, "super_resolution", {"image": 0, "scale": 3})
        assert r["error"]["code"] == "unsupported_scale"
        assert r["text"] == "Error: scale 3 is not available on this server; available scales: 2, 4."


def test_magnify_several_boxes(client, scene):
    sid = make_session(client, "default", scene, coords="abs_original")
    r = call(client, sid, "magnify", {"boxes": [[0, 0, 40, 30], [100, 100, 160, 140], [0, 0, 320, 200],
                                               [10, 10, 12, 12]]})
    assert r["ok"], r["text"]
    assert r["meta"]["boxes_original"] == [[0, 0, 40, 30], [100, 100, 160, 140]]
    assert [image_of(r, i).size for i in range(2)] == [(160, 120), (240, 160)]
    assert r["meta"]["magnified"] is True
    assert [m["method"] for m in r["meta"]["enlargements"]] == ["smfanet", "smfanet"]
    assert r["text"] == ("Magnified 2 of 4 boxes: observation_1 160x120, observation_2 240x160. Skipped: "
                         "box 3 [0, 0, 320, 200]: covers 40% of the image area or more; box 4 [10, 10, 12, 12]: the "
                         "region is 2x2 pixels of the original image; super-resolution needs at least 8x8.")


def test_mags_rl_zoom_magnifies_with_smfanet(client, scene):
    sid = make_session(client, "mags-rl", scene)  # abs_view: 320x200 is seen as 308x196
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": "<zoom>[[0, 0, 77, 49]]</zoom>"}).json()
    result = r["results"][0]
    assert result["ok"] and result["meta"]["magnified"] is True
    assert result["meta"]["enlargements"][0]["checkpoint"] == "SMFANet_DF2K_100w_x4SR.pth"
    box = result["meta"]["boxes_original"][0]
    assert act_image(r).size == ((box[2] - box[0]) * 4, (box[3] - box[1]) * 4)


def test_a_slow_enlargement_times_out_and_the_server_recovers(tmp_path):
    big = Image.fromarray(np.random.default_rng(0).integers(0, 255, (700, 900, 3), dtype=np.uint8))
    with sr_client(tmp_path, tool_timeout_s=0.5, sr_tile=128) as c:
        sid = make_session(c, "default", big)
        r = call(c, sid, "super_resolution", {"image": 0, "scale": 2})
        assert r["ok"] is False and r["error"]["code"] == "timeout"  # answered at the deadline, not at the end
        # The abandoned job stops at its deadline instead of holding the worker for the whole image.
        small = make_session(c, "default", Image.new("RGB", (32, 32), (9, 9, 9)))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = call(c, small, "super_resolution", {"image": 0, "scale": 2})
            if r["ok"]:
                break
        assert r["ok"], r["text"]
        assert image_of(r).size == (64, 64)
