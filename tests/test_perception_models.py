"""OpenThinkIMG's model tools (`grounding_dino`, `SegmentRegionAroundPoint`) on tiny GroundingDINO and SAM2 models
the tests build: loaded by the server's own `from_pretrained` path from a local directory, offline; their answers'
formats; a batched call answers what the call alone answers; the error texts."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.perception_helpers import build_tiny_got_ocr2, build_tiny_grounding_dino, build_tiny_sam2
from toolserver.batching import BatchRule, LocalTransport
from toolserver.config import Settings
from toolserver.core.modelset import PERCEPTION_MODELS, build_models
from toolserver.errors import ToolFailure
from toolserver.geometry import Coords
from toolserver.memorymap import ImageEntry
from toolserver.perception.grounding_dino import GroundingDinoRunner, caption_of, nms
from toolserver.perception.ocr import GotOcrRunner, lines_of
from toolserver.perception.sam2 import Sam2Runner
from toolserver.perception.service import PerceptionFront, PerceptionModel, PerceptionRequest, locate
from toolserver.tools.base import ToolContext
from toolserver.tools.perception_models import (
    GroundingDino,
    Ocr,
    SegmentRegionAroundPoint,
    WorkerAnswer,
    extract_points,
    plain_reply,
)

pytestmark = pytest.mark.usefixtures("offline")


@pytest.fixture(scope="module")
def offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def dino_dir(tmp_path_factory) -> Path:
    return build_tiny_grounding_dino(tmp_path_factory.mktemp("dino"))


@pytest.fixture(scope="module")
def sam2_dir(tmp_path_factory) -> Path:
    return build_tiny_sam2(tmp_path_factory.mktemp("sam2"))


@pytest.fixture(scope="module")
def ocr_dir(tmp_path_factory) -> Path:
    return build_tiny_got_ocr2(tmp_path_factory.mktemp("ocr"))


def picture(seed: int, size: tuple[int, int] = (96, 64)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)


def dino_request(seed: int, caption: str = "a red cat", size: tuple[int, int] = (96, 64)) -> PerceptionRequest:
    # Thresholds low enough that the random model keeps boxes and names phrases.
    return PerceptionRequest(picture(seed, size), {"caption": caption, "box_threshold": 0.0, "text_threshold": 0.0})


def same_detections(a: dict | None, b: dict | None) -> bool:
    """Equal up to float rounding: a batch's arithmetic may differ from one call's in the last bits, which can move a
    value across the reference's 2-decimal rounding, or reorder boxes of equal score."""
    assert a is not None and b is not None
    if a["size"] != b["size"] or len(a["boxes"]) != len(b["boxes"]):
        return False
    rows_a = sorted(zip(a["phrases"], a["boxes"], a["logits"], strict=True))
    rows_b = sorted(zip(b["phrases"], b["boxes"], b["logits"], strict=True))
    return all(pa == pb and np.allclose(ba, bb, atol=0.0101, rtol=0) and abs(la - lb) <= 0.0101
               for (pa, ba, la), (pb, bb, lb) in zip(rows_a, rows_b, strict=True))


def context(front: dict[str, PerceptionFront], image: Image.Image) -> ToolContext:
    entry = ImageEntry(key="img_1", index=0, origin="input", pixels=image, view_size=image.size)
    return ToolContext("s", (entry,), {}, Coords.ABS_ORIGINAL, 0, perception=front)


def fronts(settings: Settings) -> dict[str, PerceptionFront]:
    models = build_models(settings, PERCEPTION_MODELS)
    return {name: PerceptionFront(name, LocalTransport(model, BatchRule(8))) for name, model in models.items()}


# -- GroundingDINO ------------------------------------------------------------------------------------------------
def test_grounding_dino_answers_the_reference_workers_detection_dict(dino_dir: Path):
    model = PerceptionModel("grounding_dino", GroundingDinoRunner(), str(dino_dir))
    (reply,) = model.batch([dino_request(1)])
    result = reply.result
    assert reply.error is None and result is not None
    assert set(result) == {"boxes", "logits", "phrases", "size"} and result["size"] == [64, 96]
    assert len(result["boxes"]) == len(result["logits"]) == len(result["phrases"]) > 0
    assert all(len(box) == 4 and all(round(x, 2) == x for x in box) for box in result["boxes"])
    assert result["logits"] == sorted(result["logits"], reverse=True)  # NMS orders by falling score
    # decoded as the reference decodes: special tokens above the threshold included
    assert all(set(p.split()) <= {"a", "red", "cat", "[SEP]"} for p in result["phrases"])
    strict = model.batch([PerceptionRequest(picture(1), {"caption": "a red cat", "box_threshold": 1.0,
                                                         "text_threshold": 0.25})])[0].result
    assert strict == {"boxes": [], "logits": [], "phrases": [], "size": [64, 96]}


def test_grounding_dino_batched_calls_answer_what_each_call_alone_answers(dino_dir: Path):
    model = PerceptionModel("grounding_dino", GroundingDinoRunner(), str(dino_dir))
    requests = [dino_request(1), dino_request(2), dino_request(3, "the dog"), dino_request(4, size=(64, 64)),
                dino_request(5)]
    together = model.batch(requests)
    assert [r.batch for r in together] == [5] * 5
    assert [r.group for r in together] == [3, 3, 1, 1, 3]  # same size and caption length share a forward pass
    alone = [model.batch([r])[0] for r in requests]
    assert all(same_detections(t.result, a.result) for t, a in zip(together, alone, strict=True))


def test_the_caption_and_nms_follow_the_reference():
    import torch

    assert caption_of("  Girl ") == "girl." and caption_of("cat . dog .") == "cat . dog ."
    boxes = torch.tensor([[0, 0, 1, 1], [0, 0, 0.95, 1], [0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1.0]])
    assert nms(boxes, torch.tensor([0.5, 0.9, 0.4, 0.3]), 0.8) == [1, 2, 3]


# -- SAM2 ---------------------------------------------------------------------------------------------------------
def test_sam2_masks_are_the_images_size_and_batched_equals_alone(sam2_dir: Path):
    model = PerceptionModel("sam2", Sam2Runner(), str(sam2_dir))
    requests = [PerceptionRequest(picture(1), {"points": [(10.0, 20.0)]}),
                PerceptionRequest(picture(2, (50, 70)), {"points": [(5.0, 6.0)]}),
                PerceptionRequest(picture(3), {"points": [(10.0, 20.0), (40.0, 30.0)]})]
    together = model.batch(requests)
    assert [r.group for r in together] == [2, 2, 1]
    for reply, request in zip(together, requests, strict=True):
        assert reply.result is not None and reply.result["mask"].shape == request.pixels.shape[:2]
        assert reply.result["mask"].dtype == bool and isinstance(reply.result["score"], float)
    alone = [model.batch([r])[0] for r in requests]
    for a, b in zip(together, alone, strict=True):
        assert a.result is not None and b.result is not None
        assert np.array_equal(a.result["mask"], b.result["mask"]) and a.result["score"] == pytest.approx(b.result["score"])


def test_points_are_read_as_the_reference_reads_them():
    assert extract_points('x="21.5" y="28.5"', 200, 100) == [(21.5 / 100 * 200, 28.5 / 100 * 100)]  # its float sums
    assert extract_points('x1="10" y1="20" x2="150" y2="20" x3=\\"50\\" y3=\\"50\\"', 100, 100) == [
        (10.0, 20.0), (50.0, 50.0)]
    assert extract_points("no points here", 100, 100) == []


# -- OCR ----------------------------------------------------------------------------------------------------------
def test_ocr_reads_every_image_of_a_batch_as_alone(ocr_dir: Path):
    model = PerceptionModel("ocr", GotOcrRunner(max_new_tokens=12), str(ocr_dir))
    requests = [PerceptionRequest(picture(i, (90, 40 + 9 * i))) for i in range(4)]
    together = model.batch(requests)
    assert [r.group for r in together] == [4] * 4  # one prompt, one square input: every call shares the pass
    texts = [r.result["text"] for r in together if r.result is not None]
    assert len(texts) == 4 and len(set(texts)) > 1  # the images were read, each its own way
    assert [r.result for r in together] == [model.batch([r])[0].result for r in requests]
    assert all(r.result is not None and r.result["texts"] == lines_of(r.result["text"]) for r in together)


def test_ocr_lines_are_the_non_empty_stripped_lines():
    assert lines_of(" 1970 \n\n Sales\n") == ["1970", "Sales"] and lines_of("\n\n") == []


# -- the tools ----------------------------------------------------------------------------------------------------
def test_the_tools_answer_with_the_workers_texts(tmp_path: Path, dino_dir: Path, sam2_dir: Path, ocr_dir: Path):
    served = fronts(Settings(data_dir=tmp_path, grounding_dino_model=str(dino_dir), sam2_model=str(sam2_dir),
                             ocr_model=str(ocr_dir), ocr_max_new_tokens=8))
    image = Image.fromarray(picture(7))
    ctx = context(served, image)
    out = GroundingDino().run(ctx, GroundingDino.Args(image="img_1", param="a red cat", box_threshold=0.0))
    detections = ast.literal_eval(out.text)
    assert out.ok and detections["size"] == [64, 96] and len(detections["boxes"]) > 0
    out = Ocr().run(ctx, Ocr.Args(image="img_1"))
    assert out.ok and isinstance(ast.literal_eval(out.text), list) and ast.literal_eval(out.text) == out.meta["texts"]
    seg = SegmentRegionAroundPoint()
    out = seg.run(ctx, seg.Args(image="img_1", param='x="50" y="50"'))
    assert out.ok and out.text == "Segmentation completed." and len(out.images) == 1
    assert out.images[0].mode == "RGB" and out.meta["points"] == [[48.0, 32.0]]
    out = seg.run(ctx, seg.Args(image="img_1", param='x="150" y="50"'))
    assert (out.ok, out.text, out.images) == (False, "No valid points extracted.", [])


def test_a_profile_hands_the_worker_its_image_and_writes_its_answers(tmp_path: Path, sam2_dir: Path):
    served = fronts(Settings(data_dir=tmp_path, sam2_model=str(sam2_dir)))
    first, newest = Image.fromarray(picture(1)), Image.fromarray(picture(2, (50, 40)))
    entries = tuple(ImageEntry(key=k, index=i, origin="input", pixels=img, view_size=img.size)
                    for i, (k, img) in enumerate([("img_1", first), ("img_2", newest)]))
    ctx = ToolContext("s", entries, {}, Coords.ABS_ORIGINAL, 0, perception=served)
    answers: list[WorkerAnswer] = []

    def reply(ctx: ToolContext, answer: WorkerAnswer):
        answers.append(answer)
        return plain_reply(ctx, answer)

    seg = SegmentRegionAroundPoint(source=lambda ctx, ref: ctx.images[-1].pixels, reply=reply)
    out = seg.run(ctx, seg.Args(image="img_1", param='x="50" y="50"'))
    assert out.meta["points"] == [[25.0, 20.0]]  # the newest image's pixels (50x40), whatever `image` named
    seg.run(ctx, seg.Args(image="img_1", param="nothing"))
    assert [(a.text, a.image is not None, a.image_field, a.code) for a in answers] == [
        ("Segmentation completed.", True, True, None), ("No valid points extracted.", False, True, "no_points")]


def test_a_model_not_configured_or_missing_fails_with_the_setting_to_set(tmp_path: Path):
    served = fronts(Settings(data_dir=tmp_path, grounding_dino_model="", sam2_model=str(tmp_path / "absent")))
    ctx = context(served, Image.fromarray(picture(1)))
    with pytest.raises(ToolFailure) as dino:
        GroundingDino().run(ctx, GroundingDino.Args(image="img_1", caption="cat"))
    assert dino.value.code == "model_unavailable"
    assert dino.value.text == ("Error: GroundingDINO is not available on this server: no model configured "
                               "(set TOOLSERVER_GROUNDING_DINO_MODEL)")
    with pytest.raises(ToolFailure) as sam:
        SegmentRegionAroundPoint().run(ctx, SegmentRegionAroundPoint.Args(image="img_1", param='x="5" y="5"'))
    assert sam.value.text == (f"Error: SAM2 is not available on this server: {tmp_path / 'absent'} does not exist "
                              "(set TOOLSERVER_SAM2_MODEL)")
    assert not served["sam2"].available and "TOOLSERVER_SAM2_MODEL" in served["sam2"].unavailable_reason()


def test_an_uncached_hf_id_is_not_downloaded_and_a_broken_directory_says_why(tmp_path: Path):
    assert locate("IDEA-Research/no-such-model-here") == (
        None, "'IDEA-Research/no-such-model-here' is neither a local model directory nor in the HF cache "
              "(models are never downloaded)")
    (tmp_path / "config.json").write_text("{}")
    model = PerceptionModel("sam2", Sam2Runner(), str(tmp_path), setting="TOOLSERVER_SAM2_MODEL")
    (reply,) = model.batch([PerceptionRequest(picture(1), {"points": [(1.0, 1.0)]})])
    assert reply.error == "unavailable" and reply.message.startswith(f"SAM2 from {tmp_path} failed to load: ")
    assert model.describe()["status"]["error"] == reply.message


def test_concurrent_sessions_meet_in_one_batch(dino_dir: Path):
    model = PerceptionModel("grounding_dino", GroundingDinoRunner(), str(dino_dir))
    model.warm()
    sizes: list[int] = []
    front = PerceptionFront("grounding_dino", LocalTransport(model, BatchRule(8, wait_s=0.5)), on_batch=sizes.append)
    requests = [dino_request(i) for i in range(6)]
    answers: dict[int, dict] = {}

    def call(i: int) -> None:
        answers[i] = front.run(requests[i].pixels, requests[i].params)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(sizes) > 1  # the calls shared batches
    assert all(same_detections(answers[i], model.batch([r])[0].result) for i, r in enumerate(requests))


def test_readyz_says_where_each_perception_model_was_found(tmp_path: Path, dino_dir: Path):
    from fastapi.testclient import TestClient

    from toolserver.api import create_app

    settings = Settings(data_dir=tmp_path / "data", workers=2, clip_model="", grounding_dino_model=str(dino_dir),
                        sam2_model="", ocr_model=str(tmp_path / "absent"))
    with TestClient(create_app(settings)) as client:
        ready = client.get("/readyz").json()["perception"]
    assert ready["grounding_dino"] == {"available": True, "model": str(dino_dir), "where": f"local directory {dino_dir}",
                                       "loaded": False, "error": None, "served_by": "in-process"}
    assert ready["sam2"]["available"] is False and ready["sam2"]["where"] == "no model configured"
    assert ready["ocr"]["where"] == f"{tmp_path / 'absent'} does not exist"


def test_the_tools_run_over_http_on_the_servers_models(tmp_path: Path, dino_dir: Path, sam2_dir: Path,
                                                       ocr_dir: Path):
    """Through a server (`/v1/sessions/{id}/tools/{name}`): the call reaches the server's perception models."""
    from fastapi.testclient import TestClient

    from tests.profiles.helpers import call, image_of, make_session
    from toolserver.api import create_app
    from toolserver.profiles import PROFILES, register_profile
    from toolserver.profiles.base import Profile, tools_by_name

    register_profile(Profile("perception-models-test", "The model tools alone (a test's profile).",
                             tools_by_name(GroundingDino(), Ocr(), SegmentRegionAroundPoint()),
                             coords=Coords.ABS_ORIGINAL), source="test")
    settings = Settings(data_dir=tmp_path / "data", workers=2, clip_model="", grounding_dino_model=str(dino_dir),
                        sam2_model=str(sam2_dir), ocr_model=str(ocr_dir), ocr_max_new_tokens=4)
    try:
        with TestClient(create_app(settings)) as client:
            sid = make_session(client, "perception-models-test", Image.fromarray(picture(3)))
            found = call(client, sid, "grounding_dino", {"image": 0, "caption": "cat", "box_threshold": 0.0})
            assert found["ok"] and ast.literal_eval(found["text"])["size"] == [64, 96]
            assert isinstance(ast.literal_eval(call(client, sid, "OCR", {"image": 0})["text"]), list)
            segment = call(client, sid, "SegmentRegionAroundPoint", {"image": 0, "param": 'x="50" y="50"'})
            assert segment["text"] == "Segmentation completed." and image_of(segment).mode == "RGB"
            assert client.get("/readyz").json()["perception"]["sam2"]["loaded"] is True
    finally:
        PROFILES.unregister("perception-models-test")
