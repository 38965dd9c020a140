"""Profile behaviour that spans several profiles: the tool listings of every profile, and view defaults."""

from PIL import Image

from tests.conftest import b64, png_bytes


def test_every_profile_lists_and_strict_forms(client):
    for profile in client.get("/v1/profiles").json():
        for strict in (False, True):
            tools = client.get("/v1/tools", params={"profile": profile["name"], "strict": strict}).json()
            assert [t["function"]["name"] for t in tools] == profile["tools"]
            for t in tools:
                assert t["function"]["parameters"]["type"] == "object"


# A view rule given only a factor takes qwen-vl-utils' bounds for that factor (vision_process.py 0.0.14).
def test_a_factor_alone_takes_qwen_vl_utils_bounds_for_it(client):
    photo = Image.new("RGB", (5312, 2988), (90, 120, 30))
    sid = client.post("/v1/sessions", json={"view": {"factor": 32}, "images": [{"data": b64(png_bytes(photo))}]}).json()[
        "session_id"]
    info = client.get(f"/v1/sessions/{sid}").json()
    # max_pixels = 16384*32*32 = 16,777,216 > 5312*2976: no shrink; round(2988/32)*32 = 2976, 5312 stays.
    assert (info["images"][0]["view_width"], info["images"][0]["view_height"]) == (5312, 2976)
    assert (info["settings"]["view"]["min_pixels"], info["settings"]["view"]["max_pixels"]) == (4096, 16777216)
    explicit = client.post("/v1/sessions", json={"view": {"factor": 32, "max_pixels": 12845056},
                                                 "images": [{"data": b64(png_bytes(photo))}]}).json()
    assert (explicit["images"][0]["width"], explicit["images"][0]["height"]) == (5312, 2988)
    assert client.get(f"/v1/sessions/{explicit['session_id']}").json()["images"][0]["view_width"] == 4768
