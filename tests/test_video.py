"""Videos taken in as frames (HTTP, MCP, `/act`), refusals that leave nothing behind, and the canonical `rotate`
and `select_frames` tools. The videos are built here with PyAV: 10 s at 10 fps, frame k a grey of level 20 + 2k
(tests/video_helpers.py), so each sampled frame says which one it is."""

import asyncio
import base64
import io
import json

import numpy as np
import pytest
from mcp import Client
from PIL import Image

from tests.conftest import b64, gradient, png_bytes
from tests.profiles.helpers import act_image
from tests.profiles.helpers import call as tool
from tests.profiles.helpers import image_of as decoded
from tests.video_helpers import make_video, source_frame
from toolserver.config import Settings
from toolserver.video import VideoLimits, decode_video, sample_times

VIDEO = make_video()  # mp4 / H.264
LIMITS = VideoLimits(max_seconds=600, max_frames=256, max_pixels=10**8, max_decoded_bytes=2**31)


@pytest.fixture
def settings(settings_any_store: Settings) -> Settings:
    return settings_any_store  # intake and tools with the in-memory and with the Redis session store


def upload(client, sid, data=VIDEO, name="clip.mp4", **fields):
    return client.post(f"/v1/sessions/{sid}/images", files=[("files", (name, data, "video/mp4"))],
                       data={k: str(v) for k, v in fields.items()})


def new_session(client, profile="default", images=()):
    r = client.post("/v1/sessions", json={"profile": profile, "images": list(images)})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def frames_of(client, sid) -> list[int]:
    info = client.get(f"/v1/sessions/{sid}").json()
    return [source_frame(Image.open(io.BytesIO(client.get(f"/v1/sessions/{sid}/images/{i['key']}").content)))
            for i in info["images"]]


# -- sampling -----------------------------------------------------------------------------------------------
def test_sample_times():
    assert sample_times(10, None, None) == [k / 2 for k in range(20)]  # 2 per second by default
    assert sample_times(10, None, 4) == [1.25, 3.75, 6.25, 8.75]  # max_frames alone: centred, evenly spread
    assert sample_times(10, 1, 5) == [1.0, 3.0, 5.0, 7.0, 9.0]  # 10 at 1/s is over 5: spread instead
    assert sample_times(10, 1, 20) == [float(k) for k in range(10)]
    assert sample_times(0.2, 1, None) == [0.0]  # at least one frame


@pytest.mark.parametrize("kind", ["mp4", "webm", "mkv"])
def test_each_container_gives_the_frames_on_screen(kind):
    video = decode_video(make_video(kind), LIMITS, max_frames=4)
    # Times 1.25, 3.75, 6.25, 8.75 s; frames every 0.1 s: the ones shown are 12, 37, 62, 87.
    assert [source_frame(f) for f in video.frames] == [12, 37, 62, 87]
    assert video.timestamps == [1.2, 3.7, 6.2, 8.7]
    assert (video.width, video.height, video.duration_s) == (160, 120, 10.0)


def test_far_apart_times_seek_and_match_a_full_decode(monkeypatch):
    import toolserver.video as video_module

    long_video = make_video(seconds=40, fps=5)
    seeking = decode_video(long_video, LIMITS, max_frames=5)
    monkeypatch.setattr(video_module, "SEEK_GAP_S", 1e9)
    decoding_all = decode_video(long_video, LIMITS, max_frames=5)
    assert seeking.timestamps == decoding_all.timestamps == [4.0, 12.0, 20.0, 28.0, 36.0]
    assert [f.tobytes() for f in seeking.frames] == [f.tobytes() for f in decoding_all.frames]


# -- intake through HTTP --------------------------------------------------------------------------------------
def test_video_becomes_the_sessions_frames_in_order(client):
    r = client.post("/v1/sessions", json={"images": [{"data": b64(VIDEO), "key": "clip", "max_frames": 4}]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert [i["key"] for i in body["images"]] == ["clip_frame_1", "clip_frame_2", "clip_frame_3", "clip_frame_4"]
    (video,) = body["videos"]
    assert video["keys"] == [i["key"] for i in body["images"]] and video["timestamps_s"] == [1.2, 3.7, 6.2, 8.7]
    assert (video["container"], video["codec"], video["source_fps"]) == ("mp4", "h264", 10.0)
    assert frames_of(client, body["session_id"]) == [12, 37, 62, 87]
    # GET returns each frame losslessly (PNG): the pixels the tools work on.
    png = client.get(f"/v1/sessions/{body['session_id']}/images/clip_frame_1")
    assert png.headers["content-type"] == "image/png"


def test_multipart_sampling_fields_and_default_keys(client):
    sid = new_session(client, images=[{"data": b64(png_bytes(gradient(32, 32)))}])
    r = upload(client, sid, make_video("webm"), "clip.webm", frames_per_second=1)
    assert r.status_code == 200, r.text
    keys = [i["key"] for i in r.json()["images"]]
    assert keys == [f"original_image_{n}" for n in range(1, 11)]  # after the image already there
    assert r.json()["videos"][0]["timestamps_s"] == [float(t) for t in range(10)]
    assert frames_of(client, sid)[1:] == [10 * t for t in range(10)]
    assert upload(client, sid).json()["videos"][0]["timestamps_s"][:3] == [0.0, 0.5, 1.0]  # default: 2 per second


@pytest.mark.parametrize("data, status, words", [
    (VIDEO[:2000], 422, "cannot be opened"),  # MP4 without its index
    (make_video("webm")[:1500], 422, "truncated"),  # frames end well before the declared duration
    (b"\x00\x00\x00\x18ftypisom" + bytes(200), 422, "video"),
    (b"\x1a\x45\xdf\xa3" + bytes(100), 422, "video"),
    (b"RIFF\x00\x00\x00\x00AVI LIST" + bytes(64), 422, "MP4/MOV, WebM, MKV"),  # not a container we take
])
def test_bad_videos_are_refused_and_nothing_is_stored(client, data, status, words):
    sid = new_session(client, images=[{"data": b64(png_bytes(gradient(32, 32)))}])
    r = client.post(f"/v1/sessions/{sid}/images", files=[("files", ("a.png", png_bytes(gradient(8, 8)), "image/png")),
                                                          ("files", ("v.mp4", data, "video/mp4"))])
    assert r.status_code == status and words in r.json()["detail"], r.text
    assert len(client.get(f"/v1/sessions/{sid}").json()["images"]) == 1  # the good image was not kept either


def test_limits_answer_413(settings, tmp_path):
    from fastapi.testclient import TestClient

    from toolserver.api import create_app

    tight = settings.model_copy(update={"max_video_seconds": 5.0, "max_video_frames": 10})
    with TestClient(create_app(tight)) as client:
        sid = new_session(client)
        long = upload(client, sid)
        assert long.status_code == 413 and "over the 5-second limit" in long.json()["detail"]
        short = make_video(seconds=4)
        many = upload(client, sid, short, frames_per_second=4)  # 16 frames > 10
        assert many.status_code == 413 and "limit of 10" in many.json()["detail"]
        asked = upload(client, sid, short, max_frames=11)
        assert asked.status_code == 413
        assert client.get(f"/v1/sessions/{sid}").json()["images"] == []
    small = settings.model_copy(update={"session_max_bytes": 200_000})
    with TestClient(create_app(small)) as client:
        sid = new_session(client)
        over = upload(client, sid, max_frames=8)  # 8 frames of 160x120x3 (460 KB) do not fit in 200 KB
        assert over.status_code == 413
        assert client.get(f"/v1/sessions/{sid}").json()["images"] == []


def test_bad_sampling_fields_are_422(client):
    sid = new_session(client)
    assert upload(client, sid, frames_per_second=0).status_code == 422
    assert upload(client, sid, max_frames="many").status_code == 422
    r = client.post(f"/v1/sessions/{sid}/images", json={"images": [{"data": b64(VIDEO), "max_frames": 0}]})
    assert r.status_code == 422


# -- the canonical tools on frames -----------------------------------------------------------------------------
def test_select_frames_and_zoom_on_a_frame(client):
    sid = new_session(client, images=[{"data": b64(VIDEO), "key": "clip", "max_frames": 4}])
    r = tool(client, sid, "select_frames", {"frames": [3, "clip_frame_1"]})
    assert r["ok"] and [i["key"] for i in r["images"]] == ["observation_1", "observation_2"]
    assert [source_frame(decoded(r, i)) for i in range(2)] == [87, 12]
    assert r["text"] == ("Here are 2 frames again: `clip_frame_4` (160x120) as `observation_1` (index 4); "
                         "`clip_frame_1` (160x120) as `observation_2` (index 5).")
    zoom = tool(client, sid, "zoom_in", {"image": "clip_frame_2", "bbox_2d": [0, 0, 500, 500]})
    assert zoom["ok"] and decoded(zoom).size == (80, 60) and source_frame(decoded(zoom)) == 37
    bad = tool(client, sid, "select_frames", {"frames": [9]})
    assert not bad["ok"] and "out of range; valid indices are 0 to 6" in bad["text"]
    assert not tool(client, sid, "select_frames", {"frames": []})["ok"]


def test_rotate(client):
    src = gradient(64, 48)
    sid = new_session(client, images=[{"data": b64(png_bytes(src))}])
    quarter = tool(client, sid, "rotate", {"image": 0, "angle": 90, "expand": True})
    assert decoded(quarter).tobytes() == src.transpose(Image.Transpose.ROTATE_90).tobytes()  # exact, 48x64
    assert quarter["text"] == ("Rotated `original_image` by 90 degrees counter-clockwise (canvas expanded). "
                               "The result is image `observation_1` (index 1), 48x64 pixels.")
    half = tool(client, sid, "rotate", {"image": "original_image", "angle": -180})
    assert decoded(half).tobytes() == src.transpose(Image.Transpose.ROTATE_180).tobytes()
    same_canvas = tool(client, sid, "rotate", {"image": 0, "angle": 90})  # not square, not expanded: corners cut
    assert decoded(same_canvas).size == (64, 48)
    assert decoded(same_canvas).tobytes() == src.rotate(90, Image.Resampling.BICUBIC).tobytes()
    tilted = tool(client, sid, "rotate", {"image": 0, "angle": 30, "expand": True})
    assert decoded(tilted).size == src.rotate(30, Image.Resampling.BICUBIC, expand=True).size
    # Counter-clockwise: the top-right corner goes to the top-left.
    assert decoded(quarter).getpixel((0, 0)) == src.getpixel((63, 0))
    for args, words in [({"image": 0, "angle": float("nan")}, "angle"), ({"image": 7, "angle": 90}, "out of range"),
                        ({"image": 0}, "angle")]:
        # json.dumps writes NaN as the bare token, which the server's JSON reader (Python's) takes.
        r = client.post(f"/v1/sessions/{sid}/tools/rotate", content=json.dumps(args),
                        headers={"content-type": "application/json"}).json()
        assert not r["ok"] and words in r["text"], r


# -- MCP and /act ----------------------------------------------------------------------------------------------
def test_video_through_mcp(live_server):
    async def main():
        async with Client(f"{live_server.url}/mcp?profile=default") as mcp:
            loaded = await mcp.call_tool("load_image", {"data": b64(VIDEO), "key": "clip", "max_frames": 4})
            frames = await mcp.call_tool("select_frames", {"frames": [1, 2]})
            zoom = await mcp.call_tool("zoom_in", {"image": "clip_frame_3", "bbox_2d": [0, 0, 1000, 1000]})
            return loaded, frames, zoom

    loaded, frames, zoom = asyncio.run(asyncio.wait_for(main(), 60))
    assert not loaded.is_error
    assert loaded.content[0].text == ("Loaded a 10-second video as 4 frames, `clip_frame_1` to `clip_frame_4` "
                                      "(indices 0 to 3, 160x120 pixels), taken at 1.2, 3.7, 6.2, 8.7 s.")
    images = [Image.open(io.BytesIO(base64.b64decode(b.data))) for b in frames.content if b.type == "image"]
    assert [source_frame(i) for i in images] == [37, 62]
    assert not zoom.is_error and source_frame(Image.open(io.BytesIO(base64.b64decode(zoom.content[0].data)))) == 62


def test_video_frames_through_act(client):
    sid = new_session(client, "pixel-reasoner", images=[{"data": b64(VIDEO), "max_frames": 4}])
    j = client.post(f"/v1/sessions/{sid}/act", json={"text": '<tool_call>{"name": "select_frames", "arguments": '
                                                             '{"target_frames": [2, 4]}}</tool_call>'}).json()
    vision = "<|vision_start|><|image_pad|><|vision_end|>"
    assert j["results"][0]["ok"] and j["prompt"].endswith("Numbered 1 to 2):" + vision * 2)
    j = client.post(f"/v1/sessions/{sid}/act", json={"text": '<tool_call>{"name": "crop_image", "arguments": '
                    '{"bbox_2d": [0.3, 0.3, 0.7, 0.7], "target_image": 3}}</tool_call>'}).json()
    result = j["results"][0]
    assert result["ok"] and result["meta"]["source"] == "original_image_2"
    crop = np.asarray(act_image(j).convert("L"), dtype=float)
    assert abs(crop.mean() - (20 + 2 * 62)) < 4  # frame 62's grey
    sid = new_session(client, images=[{"data": b64(VIDEO), "max_frames": 4}])
    j = client.post(f"/v1/sessions/{sid}/act", json={"text": '<tool_call>{"name": "select_frames", "arguments": '
                                                             '{"frames": [0]}}</tool_call>'}).json()
    assert j["results"][0]["ok"] and source_frame(act_image(j)) == 12


def test_python_client_add_video(live_server, tmp_path):
    from toolserver.client import Client

    path = tmp_path / "clip.webm"
    path.write_bytes(make_video("webm"))
    with Client(live_server.url) as client, client.create_session() as session:
        added = session.add_video(path, key="clip", max_frames=3)
        assert [i.key for i in added.images] == ["clip_frame_1", "clip_frame_2", "clip_frame_3"]
        # (k + 0.5) * 10 / 3 = 1.67, 5.0, 8.33 s: the frames on screen then (one every 0.1 s) are 16, 50, 83.
        assert added.videos[0].timestamps_s == [1.6, 5.0, 8.3]
        assert source_frame(Image.open(io.BytesIO(session.image_bytes("clip_frame_2")))) == 50
