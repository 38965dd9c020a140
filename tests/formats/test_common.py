"""Call formats through `/act`: parse errors of any format come back as tool results and observations."""

import pytest


@pytest.mark.slow
def test_act_reports_parse_errors_as_results(client):
    from tests.conftest import b64, gradient, png_bytes
    sid = client.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(gradient(50, 50)))}]}).json()["session_id"]
    r = client.post(f"/v1/sessions/{sid}/act", json={"text": "<tool_call>{broken</tool_call>"}).json()
    assert r["calls"][0]["error"].startswith("Error: tool call 1 is not valid JSON")
    assert r["results"][0]["ok"] is False and r["results"][0]["error"]["code"] == "parse_error"
    assert r["observation"] == [{"role": "tool", "content": r["results"][0]["text"]}]
    mini_sid = client.post("/v1/sessions", json={"profile": "mini-o3", "images": [{"data": b64(png_bytes(
        gradient(50, 50)))}]}).json()["session_id"]
    mini = client.post(f"/v1/sessions/{mini_sid}/act", json={"text": "<grounding>{bbox}</grounding>"}).json()
    assert mini["results"][0]["ok"] is False and mini["results"][0]["error"]["code"] == "parse_error"
    assert mini["results"][0]["text"].startswith("ERROR occurs during grounding. Error Information: 'NoneType'")


def test_act_carries_each_image_once(client):
    """The observation holds each image's data URL; the results name the same images without their bytes, so an
    /act answer is not twice the size of its images. The bytes are the ones a tool call returns."""
    import base64

    from tests.conftest import b64, png_bytes
    from tests.profiles.helpers import big_image
    sid = client.post("/v1/sessions", json={"images": [{"data": b64(png_bytes(big_image(400, 300)))}]}).json()[
        "session_id"]
    text = ('<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [0, 0, 500, 500]}}</tool_call>'
            '<tool_call>{"name": "zoom_in", "arguments": {"image": 0, "bbox_2d": [500, 500, 1000, 1000]}}</tool_call>')
    acted = client.post(f"/v1/sessions/{sid}/act", json={"text": text})
    body = acted.json()
    images = [img for r in body["results"] for img in r["images"]]
    assert [img["key"] for img in images] == ["observation_1", "observation_2"]
    assert all(img["data"] is None and img["mime"] == "image/png" for img in images)
    urls = [part["image_url"]["url"] for m in body["observation"] if isinstance(m["content"], list)
            for part in m["content"] if part["type"] == "image_url"]
    assert len(urls) == 2 and all(url.startswith("data:image/png;base64,") for url in urls)
    stored = client.get(f"/v1/sessions/{sid}/images/observation_2").content
    assert base64.b64decode(urls[1].split(",", 1)[1]) == stored
    assert len(acted.content) - sum(len(url) for url in urls) < min(len(url) for url in urls)  # no second copy
