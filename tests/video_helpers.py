"""Videos the tests build themselves with PyAV (no download): frame k is a flat grey of level 20 + 2k, so a
sampled frame tells which source frame it is (compression moves levels by a step or two at most)."""

from __future__ import annotations

import io
from fractions import Fraction

import av
import numpy as np
from PIL import Image

CODECS = {"mp4": ("mp4", "libx264"), "webm": ("webm", "libvpx-vp9"), "mkv": ("matroska", "mpeg4")}


def frame_level(k: int) -> int:
    return (20 + 2 * k) % 256


def make_video(kind: str = "mp4", seconds: float = 10, fps: int = 10, width: int = 160, height: int = 120) -> bytes:
    container_format, codec = CODECS[kind]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=container_format) as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            stream.options = {"crf": "8", "preset": "ultrafast"}
        else:
            stream.bit_rate = 8_000_000  # flat greys stay within a level of their value
        for k in range(round(seconds * fps)):
            pixels = np.full((height, width, 3), frame_level(k), np.uint8)
            pixels[:8, :8] = 255 - frame_level(k)  # a corner unlike the rest, for crops and rotations
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def source_frame(image: Image.Image) -> int:
    """Which source frame a decoded frame is, from its grey level (the centre, away from the corner)."""
    level = float(np.asarray(image.convert("L"))[image.height // 2 - 8:image.height // 2 + 8,
                                                  image.width // 2 - 8:image.width // 2 + 8].mean())
    return round((level - 20) / 2)


def make_lying_video(big: tuple[int, int], frames: int = 2, header: tuple[int, int] = (64, 64), fps: int = 2) -> bytes:
    """An MJPEG in Matroska whose header (and first frame) say `header` but whose later frames are `big`: each
    frame is its own JPEG, muxed as a packet as it is, so nothing makes the sizes agree."""
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="matroska") as container:
        stream = container.add_stream("mjpeg", rate=fps)
        stream.width, stream.height, stream.pix_fmt = header[0], header[1], "yuvj420p"
        for k in range(frames):
            size = header if k == 0 else big
            jpeg = io.BytesIO()
            Image.new("RGB", size, (frame_level(k),) * 3).save(jpeg, format="JPEG", quality=50)
            packet = av.Packet(jpeg.getvalue())
            packet.stream = stream
            packet.time_base = Fraction(1, fps)
            packet.pts = packet.dts = k
            container.mux(packet)
    return buf.getvalue()
