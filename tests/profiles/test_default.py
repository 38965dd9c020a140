"""Tests of profile `default`, the canonical toolset. Its tools are tested one by one in their own files
(tests/test_tools_api.py, tests/test_sr_tools.py, tests/test_video.py, tests/test_document_tools.py, ...);
here, what the profile itself decides."""

from PIL import Image

from tests.profiles.helpers import call, image_of, make_session, translucent


# The Qwen-family profiles composite transparency on white (Alpha.WHITE); MGPO drops alpha instead
# (tests/profiles/test_mgpo.py).
def test_qwen_profiles_composite_on_white(client):
    image = translucent()
    sid = make_session(client, "default", image)
    r = call(client, sid, "zoom_in", {"image": 0, "bbox_2d": [0, 0, 500, 1000]})
    white = Image.new("RGB", image.size, (255, 255, 255))
    white.paste(image, mask=image.getchannel("A"))
    assert image_of(r).convert("RGB").tobytes() == white.crop((0, 0, 300, 400)).tobytes()
