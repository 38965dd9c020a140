"""Helpers shared by the profile tests, and by the other tests that drive a session's tools over HTTP."""

import base64
import io

import numpy as np
from PIL import Image

from tests.conftest import b64, gradient, png_bytes

ZOOM = "image_zoom_in_tool"
SRC_1000x800 = gradient(1000, 800)


def make_session(client, profile, *images, **settings):
    body = {"profile": profile, "images": [{"data": b64(png_bytes(img))} for img in images], **settings}
    r = client.post("/v1/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def call(client, sid, tool, args):
    r = client.post(f"/v1/sessions/{sid}/tools/{tool}", json=args)
    assert r.status_code == 200, r.text
    return r.json()


def image_of(result, i=0) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(result["images"][i]["data"])))


def act_image(acted, i=0) -> Image.Image:
    """The i-th image of an `/act` answer: its observation carries each image (the results carry none)."""
    urls = [part["image_url"]["url"] for message in acted["observation"] if isinstance(message["content"], list)
            for part in message["content"] if part["type"] == "image_url"]
    return Image.open(io.BytesIO(base64.b64decode(urls[i].split(",", 1)[1])))


def big_image(width, height) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def tool_call(arguments: str, name: str = ZOOM) -> dict:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def translucent(width: int = 600, height: int = 400) -> Image.Image:
    """Colour everywhere, alpha 0 on the left half: composite-on-white and drop-alpha differ there."""
    image = gradient(width, height).convert("RGBA")
    image.putalpha(Image.new("L", (width, height), 255).point(lambda v: v))
    alpha = Image.new("L", (width, height), 255)
    alpha.paste(0, (0, 0, width // 2, height))
    image.putalpha(alpha)
    return image
