"""Golden tests of profile `mgpo` (xinyu1205/verl, mgpo): one grounding crop from a fenced-JSON bbox_2d in
model-input pixels. truncate_at_json_bbox rejects a fenced list holding anything but objects, and
process_image's convert("RGB") keeps the colour under transparent pixels. The arithmetic is in the comments."""

import pytest
from PIL import Image

from tests.conftest import gradient
from tests.profiles.helpers import act_image, big_image, call, image_of, make_session, translucent


@pytest.mark.slow
def test_mgpo_float32_mapping_on_5312x2988(client):
    sid = make_session(client, "mgpo", big_image(5312, 2988))
    info = client.get(f"/v1/sessions/{sid}").json()["images"][0]
    # process_image: sqrt(1003520/15872256) = 0.251445 → 1335x751; smart_resize → 48*28=1344 x 27*28=756.
    assert (info["view_width"], info["view_height"]) == (1344, 756)
    r = call(client, sid, "grounding", {"bbox_2d": [0, 0, 1344, 756], "label": "all"})
    # float32: 756 * (1/756) * 2988 = 2987.9998 → 2987 (MGPO's crop in xinyu1205/verl @ 994efbe, `vllm_rollout_spmd.py`: crops 5312x2987, not 2988).
    assert r["ok"] and r["meta"]["box_original"] == [0, 0, 5312, 2987]
    assert r["text"] == "Based on the provided coordinates, return the sub-image:"
    # The crop (5312x2987) goes through process_image: sqrt(1003520/15866944) → int sides 1335x751.
    assert image_of(r).size == (1335, 751)


@pytest.mark.slow
def test_mgpo_invalid_box_returns_the_original(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    # 1000x800 = 800000 px is within [200704, 1003520]: input = smart_resize → 1008x812.
    for bbox in ([0, 0, 28, 100], [10, 10, 5, 100], [0, 0, 1009, 100], [0.0, 0, 100, 100]):
        r = call(client, sid, "grounding", {"bbox_2d": bbox, "label": "x"})
        assert r["ok"] is False and r["error"]["code"] == "invalid_box"
        assert r["text"] == "Not providing correct coordinates or invalid coordinate values, return the original image:"
        assert image_of(r).size == (1000, 800)
        client.delete(f"/v1/sessions/{sid}")
        sid = make_session(client, "mgpo", gradient(1000, 800))


def test_mgpo_act_fenced_json_and_single_round(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    text = 'The sign is small.\n```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}]\n```'
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert r["calls"][0]["arguments"] == {"bbox_2d": [100, 100, 400, 300], "label": "sign"}
    # int(100/1008*1000) = 99, int(100/812*800) = 98, int(400/1008*1000) = 396, int(300/812*800) = 295
    assert r["results"][0]["meta"]["box_original"] == [99, 98, 396, 295]
    obs = r["observation"][0]
    assert obs["role"] == "user" and obs["content"][0]["text"] == "Based on the provided coordinates, return the sub-image:"
    again = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert again["results"][0]["error"]["code"] == "call_limit"


@pytest.mark.parametrize("text", [
    "no json here",
    '```json\n[{"bbox_2d": [1.0, 2, 300, 400], "label": "a"}]\n```',
    '```json\n[{"bbox_2d": [1, 2, 300, 400]}]\n```',
    '```json\n{"bbox_2d": [1, 2, 300, 400], "label": "a"}\n```',
    '```json\n[{"bbox_2d": [1, 2, 300, 400], "label": "a"\n```',
])
def test_mgpo_unusable_output_returns_the_original(client, text):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    assert r["results"][0]["text"].startswith("Not providing correct coordinates")
    assert len(r["results"][0]["images"]) == 1


def test_mgpo_rejects_a_block_holding_a_non_object(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    text = '```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}, 5]\n```'
    acted = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    r = acted["results"][0]
    # truncate_at_json_bbox: `all(isinstance(item, dict) ...)` fails, no hit → the original image returns.
    assert r["ok"] is False
    assert r["text"] == "Not providing correct coordinates or invalid coordinate values, return the original image:"
    assert act_image(acted).size == (1000, 800)


def test_mgpo_a_later_valid_block_still_wins(client):
    sid = make_session(client, "mgpo", gradient(1000, 800))
    text = ('```json\n[{"bbox_2d": [1, 1, 50, 50], "label": "x"}, "y"]\n```\n'
            '```json\n[{"bbox_2d": [100, 100, 400, 300], "label": "sign"}]\n```')
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()["results"][0]
    assert r["ok"] and r["meta"]["box_original"] == [99, 98, 396, 295]  # int(100/1008*1000) …, as in MGPO


def test_mgpo_drops_alpha_and_keeps_the_colour(client):
    image = translucent()
    sid = make_session(client, "mgpo", image)
    # 600x400 = 240000 px: inside [200704, 1003520] → no process_image resize; input 588x392 (smart_resize).
    r = call(client, sid, "grounding", {"bbox_2d": [0, 0, 294, 392], "label": "left"})
    assert r["ok"], r["text"]
    # MGPO: int(294/588*600) = 300, int(392/392*400) = 400; the 300x400 crop (120,000 px) is under
    # min_pixels, so process_image scales it by sqrt(200704/120000) = 1.2933 → int sides 387x517 (NEAREST,
    # in the image's own mode), then convert("RGB") drops alpha and keeps the colour underneath.
    assert r["meta"]["box_original"] == [0, 0, 300, 400]
    expected = image.crop((0, 0, 300, 400)).resize((387, 517), Image.Resampling.NEAREST).convert("RGB")
    assert image_of(r).convert("RGB").tobytes() == expected.tobytes()
