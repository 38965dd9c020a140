"""OpenThinkIMG's `Point` tool on a tiny Molmo2 the tests build (`toolserver/perception/molmo2.py`): the inputs equal
Molmo2's own processor's, a batched call answers what the call alone answers, and the worker's prompt, answer and
failures as its rollout writes them back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from tests.conftest import b64, png_bytes
from tests.perception_helpers import build_tiny_molmo2
from tests.profiles.openthinkimg_sessions import act
from tests.test_perception_models import picture
from toolserver.api import create_app
from toolserver.config import Settings
from toolserver.perception.molmo2 import Molmo2Images, Molmo2PointRunner, image_grid, preprocess, select_tiling
from toolserver.perception.service import PerceptionModel, PerceptionRequest
from toolserver.profiles import PROFILES, register_profile
from toolserver.profiles.base import tools_by_name
from toolserver.profiles.openthinkimg import IMAGE_TOOLS, MODEL_TOOLS
from toolserver.profiles.openthinkimg import PROFILES as OPENTHINKIMG
from toolserver.tools.perception.model_workers import WorkerPoint
from toolserver.tools.perception.worker import jpeg_round_trip

NAME = "openthinkimg-point-test"
SIZES = [(70, 50), (90, 30), (20, 100), (28, 28), (13, 9)]  # (width, height): wide, tall, one crop, smaller


@pytest.fixture(scope="module")
def molmo2_dir(tmp_path_factory) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        return build_tiny_molmo2(tmp_path_factory.mktemp("molmo2"))


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def request(seed: int, size: tuple[int, int], thing: str = "cat") -> PerceptionRequest:
    return PerceptionRequest(picture(seed, size), {"prompt": f"Point to the {thing} in the scene."})


# A stand-in for the few torchvision functions Molmo2's image processor calls, as torchvision computes them on
# float tensors (bilinear: `interpolate` without align_corners; normalize: subtract, divide). It exists only inside
# this test, so that the processor's own tiling, crops, patches, pooling and prompt can be run and compared.
TORCHVISION = '''
import enum
import numpy as np
import torch
import torch.nn.functional as F


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def pil_to_tensor(pic):
    return torch.from_numpy(np.array(pic, copy=True)).permute(2, 0, 1).contiguous()


def resize(image, size, interpolation=InterpolationMode.BILINEAR, antialias=True, **kwargs):
    assert interpolation == InterpolationMode.BILINEAR and image.is_floating_point()
    shape = image.shape
    out = F.interpolate(image.reshape(-1, *shape[-3:]), size=list(size), mode="bilinear", align_corners=False,
                        antialias=antialias)
    return out.reshape(*shape[:-2], *out.shape[-2:])


def normalize(tensor, mean, std, inplace=False):
    mean = torch.as_tensor(mean, dtype=tensor.dtype).view(-1, 1, 1)
    std = torch.as_tensor(std, dtype=tensor.dtype).view(-1, 1, 1)
    return tensor.sub_(mean).div_(std) if inplace else tensor.sub(mean).div(std)
'''

COMPARE = '''
import json, sys
import numpy as np, torch, transformers
from PIL import Image
from transformers.models.molmo2.image_processing_molmo2 import Molmo2ImageProcessor
from transformers.models.molmo2.video_processing_molmo2 import Molmo2VideoProcessor
from toolserver.perception.molmo2 import Molmo2PointRunner
from toolserver.perception.service import PerceptionRequest

directory, sizes = sys.argv[1], json.loads(sys.argv[2])
config = json.load(open(directory + "/preprocessor_config.json"))
config.pop("image_processor_type")
tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
processor = transformers.Molmo2Processor(image_processor=Molmo2ImageProcessor(**config),
                                         video_processor=Molmo2VideoProcessor(), tokenizer=tokenizer,
                                         chat_template=tokenizer.chat_template)
runner = Molmo2PointRunner()
runner.load(directory, "cpu")
equal = []
for i, (width, height) in enumerate(sizes):
    pixels = np.random.default_rng(i).integers(0, 256, (height, width, 3), dtype=np.uint8)
    words = "Point to the cat in the scene."
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": words}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    theirs = processor(images=[Image.fromarray(pixels)], text=text, return_tensors="pt")
    ours = runner.inputs([PerceptionRequest(pixels, {"prompt": words})])
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    equal.append({k: bool(v.dtype == theirs[k].dtype and torch.equal(v, theirs[k])) for k, v in ours.items()})
print(json.dumps(equal))
'''


def test_the_inputs_are_molmo2s_processors(tmp_path: Path, molmo2_dir: Path):
    """The processor (torchvision's few functions stood in for) and `Molmo2PointRunner.inputs` on the same images:
    every tensor equal, bit for bit."""
    functional = tmp_path / "shim" / "torchvision" / "transforms"
    (functional / "v2").mkdir(parents=True)
    (functional.parent / "io").mkdir()
    (functional.parent / "io" / "__init__.py").write_text("")
    (tmp_path / "shim" / "torchvision" / "__init__.py").write_text('__version__ = "0+test"\n')
    (functional / "__init__.py").write_text("from torchvision.transforms.functional import InterpolationMode\n")
    (functional / "functional.py").write_text(TORCHVISION)
    (functional / "v2" / "__init__.py").write_text("")
    (functional / "v2" / "functional.py").write_text("from torchvision.transforms.functional import *  # noqa\n")
    root = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": f"{root}:{tmp_path / 'shim'}", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(COMPARE), str(molmo2_dir), json.dumps(SIZES)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    equal = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(equal) == len(SIZES) and all(all(row.values()) for row in equal), equal


def test_the_grid_without_pixels_is_the_preprocessed_ones(molmo2_dir: Path):
    images = Molmo2Images.from_directory(str(molmo2_dir))
    assert images.crop_size == 28 and images.overlap_margins == (1, 1) and images.max_crops == 4
    for seed, (width, height) in enumerate(SIZES):
        done = preprocess(picture(seed, (width, height)), images)
        assert done["grid"] == image_grid(height, width, images)
        assert done["pooling"].shape[0] == done["grid"][0] * done["grid"][1] + done["grid"][2] * done["grid"][3]
    assert select_tiling(100, 100, 378, 8) == (1, 1) and select_tiling(378 * 3, 378, 378, 8) == (3, 1)


def test_a_batch_answers_what_each_call_alone_answers(molmo2_dir: Path, offline):
    model = PerceptionModel("point", Molmo2PointRunner(max_new_tokens=8), str(molmo2_dir))
    requests = [request(0, (70, 50)), request(1, (70, 50), "dog"), request(2, (70, 50)), request(3, (90, 30)),
                request(4, (70, 50), "red car")]
    together = model.batch(requests)
    # The same size and prompt length share a pass; another size or a longer prompt runs apart, unpadded.
    assert [r.group for r in together] == [3, 3, 3, 1, 1] and all(r.error is None for r in together)
    texts = [r.result["text"] for r in together if r.result is not None]
    assert len(texts) == 5 and len(set(texts)) > 1  # each image read its own way
    assert [r.result for r in together] == [model.batch([r])[0].result for r in requests]


def test_a_directory_without_a_chat_template_fails_to_load_with_the_reason(tmp_path: Path, molmo2_dir: Path,
                                                                          offline):
    broken = tmp_path / "broken"
    broken.mkdir()
    for file in molmo2_dir.iterdir():
        if file.name != "chat_template.jinja":
            (broken / file.name).write_bytes(file.read_bytes())
    config = json.loads((broken / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (broken / "tokenizer_config.json").write_text(json.dumps(config))
    (reply,) = PerceptionModel("point", Molmo2PointRunner(), str(broken)).batch([request(0, (70, 50))])
    assert reply.error == "unavailable" and "has no chat template" in reply.message


# -- the worker, as the rollout drives it ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client(tmp_path_factory, molmo2_dir: Path):
    tmp = tmp_path_factory.mktemp("point")
    (profile,) = OPENTHINKIMG
    register_profile(type(profile)(NAME, profile.description, tools_by_name(*IMAGE_TOOLS, WorkerPoint()),
                                   coords=profile.coords, call_format=profile.format, alpha=profile.alpha),
                     source="test")
    settings = Settings(data_dir=tmp / "data", workers=2, clip_model="", point_model=str(molmo2_dir),
                        point_max_new_tokens=6)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HF_HUB_OFFLINE", "1")
            with TestClient(create_app(settings)) as client:
                yield client
    finally:
        PROFILES.unregister(NAME)


def turn(client: TestClient, sid: str, name: str, arguments: dict) -> dict:
    body = {"profile": NAME, "images": [{"data": b64(png_bytes(Image.fromarray(picture(5))))}],
            "texts": {"question": "What is shown?"}}
    if not sid:
        sid = client.post("/v1/sessions", json=body).json()["session_id"]
    response = client.post(f"/v1/sessions/{sid}/act", json={"text": act(name, arguments)})
    assert response.status_code == 200, response.text
    return response.json()


def test_point_answers_the_models_text_for_the_workers_prompt(client, molmo2_dir: Path, offline):
    answer = turn(client, "", "Point", {"image": "img_1", "param": "red car"})
    result = answer["results"][0]
    assert result["ok"] and result["meta"]["prompt"] == "Point to the red car in the scene."
    # The worker is handed the newest image as the rollout's JPEG and answers the model's text, raw.
    pixels = np.asarray(jpeg_round_trip(Image.fromarray(picture(5))))
    model = PerceptionModel("point", Molmo2PointRunner(max_new_tokens=6), str(molmo2_dir))
    (alone,) = model.batch([PerceptionRequest(pixels, {"prompt": "Point to the red car in the scene."})])
    assert alone.result is not None and result["text"] == alone.result["text"]
    observed = [p["text"] for m in answer["observation"] for p in m["content"] if p["type"] == "text"]
    assert any(f"Point model outputs: {result['text']}" in text for text in observed)


def test_point_formats_any_param_and_fails_as_the_worker_without_one(client):
    none = turn(client, "", "point", {"image": "img_1", "param": None})["results"][0]
    assert none["ok"] and none["meta"]["prompt"] == "Point to the None in the scene."  # Python's format of None
    for arguments in ({"image": "img_1"}, {"param": "cat"}, {"image": None, "param": "cat"}):
        missing = turn(client, "", "Point", arguments)["results"][0]
        assert missing["text"] == "Failed to call tool Point: Expecting value: line 1 column 1 (char 0)"


def test_a_server_without_molmo2_answers_tool_point_not_found(tmp_path: Path):
    register_profile(type(OPENTHINKIMG[0])(NAME + "-bare", "", tools_by_name(*IMAGE_TOOLS, WorkerPoint()),
                                           coords=OPENTHINKIMG[0].coords, call_format=OPENTHINKIMG[0].format,
                                           alpha=OPENTHINKIMG[0].alpha), source="test")
    settings = Settings(data_dir=tmp_path / "data", workers=2, clip_model="", point_model="")
    try:
        with TestClient(create_app(settings)) as client:
            body = {"profile": NAME + "-bare", "images": [{"data": b64(png_bytes(Image.fromarray(picture(5))))}]}
            sid = client.post("/v1/sessions", json=body).json()["session_id"]
            result = turn(client, sid, "Point", {"image": "img_1", "param": "cat"})["results"][0]
            assert result["text"] == "Tool Point not found." and result["ok"] is False
            assert result["meta"]["reason"] == (
                "Error: Molmo2 is not available on this server: no model configured (set TOOLSERVER_POINT_MODEL)")
    finally:
        PROFILES.unregister(NAME + "-bare")


def test_the_profile_serves_point_on_the_heavy_lane():
    (point,) = [tool for tool in MODEL_TOOLS if tool.name == "Point"]
    assert isinstance(point, WorkerPoint) and point.lane == "heavy"
