"""Video frames are checked against the limits themselves, not against the header (which may lie): a real server
process refuses such videos with 413 before their big frames are kept, within a bound on its memory."""

import base64
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_server, stop_server
from tests.video_helpers import make_lying_video

MiB = 1024 * 1024
SESSION_MAX = 300 * MiB


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    live = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path_factory.mktemp("video-limits")),
                         "TOOLSERVER_SESSION_MAX_BYTES": str(SESSION_MAX)})
    yield live
    stop_server(live)


def upload(server, video: bytes, max_frames: int) -> httpx.Response:
    body = {"images": [{"data": base64.b64encode(video).decode(), "max_frames": max_frames}]}
    return httpx.post(server.url + "/v1/sessions", json=body, timeout=120)


def test_a_frame_larger_than_its_header_says_is_refused_at_that_frame(server):
    # 64x64 in the header and the first frame; the second frame is 12000x12000 = 144 MP, over MAX_IMAGE_PIXELS.
    before = peak_rss(server.proc.pid)
    r = upload(server, make_lying_video((12000, 12000), frames=2), max_frames=2)
    assert r.status_code == 413 and "12000x12000" in r.json()["detail"], r.text
    # FFmpeg decodes that frame (YUV 4:2:0, 216 MB) before it can be seen; nothing converts or keeps it.
    assert peak_rss(server.proc.pid) - before < 600 * MiB


def test_frames_over_the_session_budget_stop_the_intake_as_they_come(server):
    # 64x64 in the header; then frames of 6000x6000 (108 MB each as RGB): the first of them is refused, as larger
    # than its header says, before it is converted or kept.
    before = peak_rss(server.proc.pid)
    r = upload(server, make_lying_video((6000, 6000), frames=8), max_frames=8)
    assert r.status_code == 413 and "6000x6000, larger than the 64x64" in r.json()["detail"], r.text
    assert peak_rss(server.proc.pid) - before < 400 * MiB  # one frame in flight
    sid = httpx.post(server.url + "/v1/sessions", json={}).json()["session_id"]
    assert httpx.get(f"{server.url}/v1/sessions/{sid}").status_code == 200  # the server is fine


@pytest.mark.slow
def test_a_lying_video_under_a_large_budget_costs_one_frame(tmp_path):
    """32 frames of 6000x6000 (3.4 GB as RGB) behind a 64x64 header, under a 2 GiB session budget that the
    header's size fits: refused at the first frame that contradicts the header, the server's peak memory near
    one frame's (it used to decode and keep frames until the budget ran out)."""
    live = start_server({"TOOLSERVER_DATA_DIR": str(tmp_path), "TOOLSERVER_SESSION_MAX_BYTES": str(2 * 1024 * MiB)})
    try:
        r = upload(live, make_lying_video((6000, 6000), frames=32), max_frames=32)
        assert r.status_code == 413 and "larger than the 64x64 its header declares" in r.json()["detail"], r.text
        assert peak_rss(live.proc.pid) < 1024 * MiB
    finally:
        stop_server(live)
