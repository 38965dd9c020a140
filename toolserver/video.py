"""Video intake: a video file becomes a list of sampled frames (RGB Pillow images), free of HTTP.

Decoding uses PyAV, whose wheels bundle FFmpeg's libraries: no system ffmpeg at run time. Only the
containers a trainer sends (MP4/MOV, WebM/Matroska) are accepted; they are recognised by their first
bytes, so an image is never mistaken for a video.

Sampling (docs/decisions.md, "Video as frames"):
- `frames_per_second` f: frames at t = 0, 1/f, 2/f, … while t < duration; when that is more than
  `max_frames`, `max_frames` frames spread evenly instead, at t = (k + 0.5) · duration / max_frames.
- `max_frames` alone: that many frames spread evenly, at the same centred times.
- `every_frame` (a profile that cuts clips from the whole video, LongVT): every frame of the stream, frame k at
  t = k / its average rate, as many as the stream header counts (else duration · rate, rounded).
- The frame taken for a time t is the one on screen at t: the last frame whose timestamp is ≤ t (the first
  frame for a t before it). Far-apart times are reached by seeking to the keyframe before them and decoding
  forward, which gives the same frames as decoding everything.
Everything is checked before pixels are kept: the duration, the frame size, the frame count and the bytes
the decoded frames will take. A refusal leaves nothing behind (the caller registers all frames or none).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PIL import Image

from toolserver.errors import ImageRejected, TooLarge

DEFAULT_FPS = 2.0  # qwen-vl-utils' default sampling rate for videos
DEFAULT_MAX_FRAMES = 32
SEEK_GAP_S = 4.0  # a wanted time this far past the last decoded frame is reached by seeking
TRUNCATED_GAP_S = 1.5  # frames ending this long before the declared duration: a truncated file
_EPS = 1e-6


@dataclass(frozen=True)
class VideoLimits:
    max_seconds: float
    max_frames: int  # frames one video may give
    max_pixels: int  # per frame
    max_decoded_bytes: int  # all sampled frames together, RGB


@dataclass
class DecodedVideo:
    frames: list[Image.Image]
    timestamps: list[float]  # each frame's own timestamp, seconds
    container: str  # "mp4" or "matroska"
    codec: str
    duration_s: float
    width: int
    height: int
    source_fps: float | None


def sniff_container(data: bytes) -> str | None:
    """'mp4' (ISO base media: MP4, MOV, M4V), 'matroska' (WebM, MKV) or None."""
    if len(data) >= 12 and data[4:8] == b"ftyp":
        return "mp4"
    if data[:4] == b"\x1a\x45\xdf\xa3":  # EBML magic
        return "matroska"
    return None


def looks_like_video(data: bytes) -> bool:
    return sniff_container(data) is not None


def sample_times(duration: float, fps: float | None, max_frames: int | None) -> list[float]:
    """The times (seconds) to take frames at; see the module docstring."""
    if fps is None and max_frames is None:
        fps = DEFAULT_FPS
    cap = max_frames if max_frames is not None else DEFAULT_MAX_FRAMES
    if fps is not None:
        count = max(1, math.ceil(duration * fps - _EPS))
        if count <= cap:
            return [k / fps for k in range(count)]
    return [(k + 0.5) * duration / cap for k in range(cap)]


def every_frame_times(stream, duration: float) -> list[float]:
    """Each frame's time, frame k at k / the stream's average rate (a constant-rate stream's timestamps)."""
    rate = stream.average_rate
    if not rate or rate <= 0:
        raise ImageRejected("the video declares no frame rate, so its frames cannot be taken one by one",
                            code="invalid_video")
    count = stream.frames if stream.frames and stream.frames > 0 else max(1, round(duration * float(rate)))
    return [float(k / rate) for k in range(count)]


def decode_video(data: bytes, limits: VideoLimits, *, fps: float | None = None,
                 max_frames: int | None = None, every_frame: bool = False) -> DecodedVideo:
    """Sampled frames of a video, or ImageRejected (422: unreadable, unsupported) / TooLarge (413)."""
    kind = sniff_container(data)
    if kind is None:
        raise ImageRejected("the data is not a video container the server reads (MP4/MOV, WebM, MKV)",
                            code="invalid_video")
    if max_frames is not None and max_frames > limits.max_frames:
        raise TooLarge(f"max_frames={max_frames} is over this server's limit of {limits.max_frames} frames per video")
    import av  # imported on first use: sessions without videos never pay for it

    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.FFmpegError, ValueError, OSError) as exc:
        raise ImageRejected(f"the video cannot be opened: {_reason(exc)}", code="invalid_video") from None
    try:
        return _decode(container, kind, limits, fps, max_frames, every_frame)
    except (av.FFmpegError, OSError) as exc:
        raise ImageRejected(f"the video data is broken: {_reason(exc)}", code="invalid_video") from None
    finally:
        container.close()


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)  # FFmpeg's own words, without errno and file name


def _decode(container, kind: str, limits: VideoLimits, fps: float | None, max_frames: int | None,
            every_frame: bool = False) -> DecodedVideo:
    if not container.streams.video:
        raise ImageRejected("the file holds no video stream", code="invalid_video")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"  # frame and slice threads: decoding is most of the cost
    width, height = stream.codec_context.width, stream.codec_context.height
    if width <= 0 or height <= 0:
        raise ImageRejected(f"the video has an empty frame size {width}x{height}", code="invalid_video")
    if width * height > limits.max_pixels:
        raise TooLarge(f"video frames are {width}x{height} = {width * height} pixels, over the "
                       f"{limits.max_pixels}-pixel limit")
    duration = _duration(container, stream)
    if duration > limits.max_seconds:
        raise TooLarge(f"the video lasts {duration:.1f} s, over the {limits.max_seconds:g}-second limit")
    times = every_frame_times(stream, duration) if every_frame else sample_times(duration, fps, max_frames)
    if len(times) > limits.max_frames:
        advice = ("this profile keeps every frame: send a shorter video or raise the server's max_video_frames"
                  if every_frame else "lower frames_per_second or set max_frames")
        raise TooLarge(f"sampling gives {len(times)} frames, over this server's limit of {limits.max_frames} "
                       f"per video; {advice}")
    if len(times) * width * height * 3 > limits.max_decoded_bytes:
        raise TooLarge(f"{len(times)} frames of {width}x{height} take {len(times) * width * height * 3} bytes "
                       f"decoded, over the {limits.max_decoded_bytes}-byte budget")
    frames, stamps = _pick(container, stream, times, limits, (width, height))
    rate = float(stream.average_rate) if stream.average_rate else None
    return DecodedVideo(frames=frames, timestamps=stamps, container=kind, codec=stream.codec_context.name,
                        duration_s=duration, width=width, height=height, source_fps=rate)


def _duration(container, stream) -> float:
    """Seconds, from the stream or container header; else from the last packet's end (demuxing only)."""
    if stream.duration is not None and stream.time_base is not None and stream.duration > 0:
        return float(stream.duration * stream.time_base)
    if container.duration is not None and container.duration > 0:
        return container.duration / 1_000_000  # AV_TIME_BASE
    end = 0.0
    for packet in container.demux(stream):
        if packet.pts is not None and packet.time_base is not None:
            end = max(end, float((packet.pts + (packet.duration or 0)) * packet.time_base))
    container.seek(0)
    if end <= 0:
        raise ImageRejected("the video has no timed frames", code="invalid_video")
    return end


def _pick(container, stream, times: list[float], limits: VideoLimits,
          header: tuple[int, int]) -> tuple[list[Image.Image], list[float]]:
    """The frame on screen at each time (times ascending), converted once each. Every decoded frame is checked
    against the limits itself, since a header may lie about its frames: the first one too large, or larger than
    the header says (the byte budget was checked against the header's size), stops the intake before it is
    converted or kept, so a lying video costs one decoded frame; so does the running total of what is kept."""
    max_seconds = limits.max_seconds

    def frames_from(seconds: float | None) -> Iterator[Any]:  # PyAV video frames
        if seconds is not None:
            container.seek(int(seconds / stream.time_base), stream=stream, backward=True, any_frame=False)
        for frame in container.decode(stream):
            if frame.width * frame.height > limits.max_pixels:
                raise TooLarge(f"the video's frame at {frame.time or 0:.2f} s is {frame.width}x{frame.height} = "
                               f"{frame.width * frame.height} pixels, over the {limits.max_pixels}-pixel limit "
                               "(its header says otherwise)")
            if frame.width > header[0] or frame.height > header[1]:
                raise TooLarge(f"the video's frame at {frame.time or 0:.2f} s is {frame.width}x{frame.height}, "
                               f"larger than the {header[0]}x{header[1]} its header declares, which its limits "
                               "were checked against")
            if frame.time is None:
                continue
            if frame.time > max_seconds + 1:  # a header that lied about the duration
                raise TooLarge(f"the video runs past the {max_seconds:g}-second limit")
            yield frame

    decoded = frames_from(None)
    current = next(decoded, None)
    if current is None:
        raise ImageRejected("the video has no decodable frames", code="invalid_video")
    upcoming = next(decoded, None)
    images: list[Image.Image] = []
    stamps: list[float] = []
    last: tuple[Any, Image.Image] | None = None  # a frame picked for several times is converted once
    kept = 0  # bytes of the converted frames so far
    for t in times:
        if upcoming is not None and t - current.time > SEEK_GAP_S:
            decoded = frames_from(t)
            current = next(decoded, current)
            upcoming = next(decoded, None)
        while upcoming is not None and upcoming.time <= t + _EPS:
            current, upcoming = upcoming, next(decoded, None)
        if upcoming is None and t > current.time + TRUNCATED_GAP_S:
            raise ImageRejected(f"the video's frames end at {current.time:.2f} s, before {t:.2f} s of its declared "
                                "duration: the file is truncated or broken", code="invalid_video")
        if last is not None and last[0] is current:
            image = last[1]
        else:
            kept += current.width * current.height * 3
            if kept > limits.max_decoded_bytes:
                raise TooLarge(f"the video's sampled frames take over {limits.max_decoded_bytes} bytes decoded "
                               "(its frames are larger than its header says)")
            image = current.to_image()  # RGB24 through swscale
            last = (current, image)
        images.append(image)
        stamps.append(round(float(current.time), 6))
    return images, stamps
