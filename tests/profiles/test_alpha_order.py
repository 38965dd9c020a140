"""Where a reference crops and resizes an image in its own mode and only then makes it RGB, so do its profiles:
Qwen-Agent's Qwen3-VL zoom and Groundlight's zoom, against their own code run on RGBA, LA and palette PNGs
(scripts/goldens/record_zoom_alpha.py into tests/data/zoom_alpha_golden.json). What they made is shown to the model
composited on white; composited first, the pixels differ (alpha premultiplied by the resize, a palette resized
NEAREST), which each case checks too. VisionThink's and CodeDance's cases are in their own test modules."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64
from tests.profiles.alpha_inputs import png
from tests.profiles.helpers import call, image_of
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.imaging import to_rgb
from toolserver.profiles.qwen_family import qwen3_crop_and_resize

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "zoom_alpha_golden.json").read_text())["cases"]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), sr_model_dir=tmp_path_factory.mktemp("none"))
    with TestClient(create_app(settings)) as client:
        yield client


def digest(image: Image.Image) -> str:
    assert image.mode == "RGB"
    return hashlib.sha256(image.tobytes()).hexdigest()


def session(client: TestClient, profile: str, data: bytes) -> str:
    response = client.post("/v1/sessions", json={"profile": profile, "images": [{"data": b64(data)}]})
    assert response.status_code == 201, response.text
    return response.json()["session_id"]


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_qwen3_vl_zooms_in_the_images_own_mode(client, case):
    data = png(*case["input"])
    assert hashlib.sha256(data).hexdigest() == case["png_sha256"]
    sid = session(client, "qwen3-vl", data)
    for recorded in case["qwen3_vl"]:
        result = call(client, sid, "image_zoom_in_tool", recorded["params"])
        image = image_of(result).convert("RGB")
        assert [*image.size] == recorded["shown"]["size"] and digest(image) == recorded["shown"]["sha256"]
        composited_first = qwen3_crop_and_resize(to_rgb(Image.open(io.BytesIO(data)), "white"),
                                                 result["meta"]["box_original"])
        assert digest(composited_first) != recorded["shown"]["sha256"]


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_groundlight_zooms_in_the_images_own_mode(client, case):
    data = png(*case["input"])
    sid = session(client, "groundlight", data)
    for recorded in case["groundlight"]:
        image = image_of(call(client, sid, "zoom", {"keypoint": recorded["keypoint"]})).convert("RGB")
        assert [*image.size] == recorded["shown"]["size"] and digest(image) == recorded["shown"]["sha256"]


def test_composited_first_differs_from_the_reference():
    """The check the cases above make is not vacuous: the old order (RGB at intake, then resize) misses them."""
    case = next(c for c in GOLDEN if c["name"] == "palette")
    recorded = case["groundlight"][0]
    rgb = to_rgb(Image.open(io.BytesIO(png(*case["input"]))), "white")
    old = rgb.crop((0, 0, *rgb.size)).resize(tuple(recorded["shown"]["size"]), Image.Resampling.LANCZOS)
    assert digest(old) != recorded["shown"]["sha256"]


def test_both_stores_read_the_upload_in_its_own_mode(settings_any_store):
    """A Redis session's tool reads the upload's bytes back from Redis: the same pixels as in memory."""
    case = next(c for c in GOLDEN if c["name"] == "rgba")
    with TestClient(create_app(settings_any_store)) as client:
        sid = session(client, "qwen3-vl", png(*case["input"]))
        recorded = case["qwen3_vl"][0]
        image = image_of(call(client, sid, "image_zoom_in_tool", recorded["params"])).convert("RGB")
        assert digest(image) == recorded["shown"]["sha256"]


CODE = json.loads((Path(__file__).parents[1] / "data" / "code_alpha_golden.json").read_text())["cases"]
CODE_IMAGE = {"pyvision-rl": "image_clue_0", "deepeyes-v2": "image_1"}


@pytest.mark.parametrize(("profile", "name"), [(p, n) for p in CODE for n in CODE[p]])
def test_code_sees_the_image_its_environment_hands_it(client, profile, name):
    """PyVision-RL and DeepEyesV2 hand the code `process_raw_image` of the row: `convert("RGB")`, alpha dropped
    (tests/data/code_alpha_golden.json, scripts/goldens/record_code_alpha.py)."""
    recorded = CODE[profile][name]
    variable = CODE_IMAGE[profile]
    sid = session(client, profile, png(*recorded["input"]))
    code = (f"import hashlib\nprint({variable}.size, {variable}.mode, "
            f"hashlib.sha256({variable}.convert('RGB').tobytes()).hexdigest())")
    result = call(client, sid, "python", {"code": code})
    assert f"({recorded['size'][0]}, {recorded['size'][1]}) RGB {recorded['sha256']}" in result["text"], result


THYME = json.loads((Path(__file__).parents[1] / "data" / "thyme_alpha_golden.json").read_text())


@pytest.mark.parametrize("name", list(THYME["cases"]))
def test_thyme_code_opens_the_image_in_its_own_mode(client, name):
    """Thyme's code opens the dataset's file itself (tests/data/thyme_alpha_golden.json, its own executor): RGBA and
    LA keep their alpha; a palette crosses the sandbox as RGBA, its colours the same (docs/decisions.md)."""
    recorded = THYME["cases"][name]
    sid = session(client, "thyme", png(*recorded["input"]))
    text = call(client, sid, "python", {"code": THYME["read_back"]})["text"]
    size = f"({recorded['size'][0]}, {recorded['size'][1]})"
    if recorded["mode"] == "P":
        assert f"RGBA {size} {recorded['rgba_sha256']} {recorded['rgba_sha256']}" in text, text
    else:
        assert recorded["printed"].strip() in text, text
