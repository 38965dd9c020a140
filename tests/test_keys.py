"""Keys are URL path segments: `.` and `..` (which clients normalise away) are refused, for images and texts."""

from tests.conftest import b64, gradient, png_bytes


def test_dot_segment_keys_are_refused(client):
    image = b64(png_bytes(gradient(20, 10)))
    for key in (".", ".."):
        r = client.post("/v1/sessions", json={"images": [{"data": image, "key": key}]})
        assert r.status_code == 422 and "cannot be" in r.text
        r = client.post("/v1/sessions", json={"texts": {key: "hello"}})
        assert r.status_code == 422 and r.json()["code"] == "invalid_request"
    made = client.post("/v1/sessions", json={"images": [{"data": image, "key": ".hidden..png"}]})
    assert made.status_code == 201
    sid = made.json()["session_id"]
    assert client.get(f"/v1/sessions/{sid}/images/.hidden..png").status_code == 200
