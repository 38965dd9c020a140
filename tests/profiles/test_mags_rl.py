"""Golden tests of profile `mags-rl`: the <zoom>[[x1,y1,x2,y2],...]</zoom> magnifying glass, boxes under 40% of
the image, one call."""

from tests.conftest import gradient
from tests.profiles.helpers import act_image, make_session


def test_mags_rl_boxes_and_area_rule(client):
    sid = make_session(client, "mags-rl", gradient(1000, 800))  # viewed as 1008x812 (abs_view)
    text = "<think>two signs <zoom>[[0, 0, 504, 406], [0, 0, 1008, 812], [10, 10, 5, 5]]</zoom></think>"
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": text}).json()
    result = r["results"][0]
    # [0,0,504,406] → [0,0,500,400] = 25 % of the area: valid. The whole image (100 %) and the inverted box: skipped.
    assert result["ok"] and result["meta"]["boxes_original"] == [[0, 0, 500, 400]]
    assert "box 2 [0, 0, 1008, 812]: covers 40% of the image area or more" in result["text"]
    assert "box 3 [10, 10, 5, 5]: needs x1 < x2 and y1 < y2" in result["text"]
    # This server has no SMFANet weights (tests/test_sr_tools.py covers the network): x4 by bicubic, said so.
    assert result["meta"]["magnified"] is False
    assert result["meta"]["enlargements"] == [{"method": "bicubic", "scale": 4.0, "requested_scale": 4,
                                               "reason": "no SMFANet weights installed"}]
    assert act_image(r).size == (2000, 1600)


def test_mags_rl_failure_message(client):
    sid = make_session(client, "mags-rl", gradient(1000, 800))
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": "<zoom>[[0, 0, 1008, 812]]</zoom>"}).json()
    assert r["results"][0]["ok"] is False and r["results"][0]["text"].startswith("Zoom failed: no valid box.")
    sid = make_session(client, "mags-rl", gradient(1000, 800))
    bad = client.post(f"/v1/sessions/{sid}/act", json={"text": "<zoom>[0, 0, 10, 10]</zoom>"}).json()
    assert bad["results"][0]["text"].startswith("Zoom failed: cannot read the boxes")
