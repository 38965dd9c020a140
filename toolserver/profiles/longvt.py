"""LongVT's `crop_video` (profile `longvt`): the frames of a stretch of the session's video, in absolute seconds.

Reference: EvolvingLMMs-Lab/LongVT @ 08d755b9, `examples/video_tools/mcp_server.py` (the FastMCP tool, its checks
and texts) and `custom_tools/video_tools.py` (the trainer's `VideoTools`: what the model is shown), with the pins of
its `requirements_reproduce.txt`: qwen-vl-utils 0.0.11 (`vision_process.py`: `fetch_video`, `smart_nframes`,
`smart_resize`, `calculate_video_frame_range`), decord 0.6.0, torchvision 0.21.0, mcp 1.12.1.

- The video is the session's: taken in once, every frame kept (`Profile.keeps_every_frame`), under a key;
  `video_path` is that key, or a path whose last part is that key (the path a dataset row has). Its duration is
  OpenCV's, frames / rate.
- Frames as `fetch_video` takes them with LongVT's element (fps 1, 1 to 128 frames, pixels 28·28 to 224·224):
  decord's path first (frames ceil(start·rate) to floor(end·rate), `smart_nframes`, `torch.linspace` rounded);
  where that range is empty, qwen-vl-utils falls back to torchvision's `read_video`, which takes the frames whose
  time lies in [start, end] and the frame on screen at `start`; then one `smart_resize` size for all, bicubic with
  antialias (torchvision 0.21's tensor `resize`: float32 through torch's `interpolate`, clamped, rounded to uint8).
- Texts: a check that fails is the server's ValueError (or FileNotFoundError) text in FastMCP's "Error executing
  tool crop_video: …", which `VideoTools` shows as "Tool execution failed: …"; a success is its fixed sentence
  with the frames as the result's images. Arguments are read as FastMCP's pydantic model reads them (lax: "2" is
  2.0, an int is a float, so 5 prints as 5.0; a null or a wrong type is pydantic's validation error text).
- Over MCP the profile answers as the server itself does (`Profile.mcp_text`): the frames alone, or the error text
  without `VideoTools`' words, so LongVT's own trainer pointed at toolserver shows its model what it showed it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolserver.formats.hermes import HERMES
from toolserver.memorymap import ImageEntry
from toolserver.profiles.base import Profile, tools_by_name
from toolserver.tools.base import Tool, ToolContext, ToolOutput

SUCCESS = "The tool executed successfully. Here are the processed result"
TRAINER_PREFIX = "Tool execution failed: "  # VideoTools' words before the server's error text
FAILED = TRAINER_PREFIX + "Error executing tool crop_video: {}"
FPS, MIN_FRAMES, MAX_FRAMES = 1.0, 1, 128  # LongVT's video element
MIN_PIXELS, MAX_PIXELS = 28 * 28, 224 * 224
FACTOR, FRAME_FACTOR = 28, 2  # qwen-vl-utils' IMAGE_FACTOR and FRAME_FACTOR
VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS = 768 * 28 * 28, int(128000 * 28 * 28 * 0.9)
MAX_RATIO = 200
_EPS = 1e-6  # seconds: our frame times are k / rate, torchvision compares stream timestamps
_PYDANTIC_LINK = re.compile(r"(https://errors\.pydantic\.dev/)[0-9.]+/")


class CropFailed(Exception):
    """A check of the reference that fails: its exception text."""


class CropVideoArgs(BaseModel):
    """FastMCP's arguments model of the tool: typed fields whose default is None (a JSON null is refused)."""

    model_config = ConfigDict(extra="ignore", title="crop_videoArguments")

    video_path: str = Field(default=None, description="Path to the video file")  # type: ignore[assignment]
    start_time: float = Field(default=None, description="Start time in seconds")  # type: ignore[assignment]
    end_time: float = Field(default=None,  # type: ignore[assignment]
                            description="End time in seconds, must be > start_time")


def read_arguments(raw: Any) -> CropVideoArgs:
    """FastMCP's reading: pydantic's lax validation, its error text as pydantic 2.11.7 (the reference's pin) writes
    it, whose link names its own version."""
    try:
        return CropVideoArgs.model_validate(raw)
    except ValidationError as exc:
        raise CropFailed(_PYDANTIC_LINK.sub(r"\g<1>2.11/", str(exc))) from None


def _round_by(n: float, f: int) -> int:
    return round(n / f) * f


def _ceil_by(n: float, f: int) -> int:
    return math.ceil(n / f) * f


def _floor_by(n: float, f: int) -> int:
    return math.floor(n / f) * f


def smart_resize(height: int, width: int, min_pixels: int, max_pixels: float) -> tuple[int, int]:
    """qwen-vl-utils' smart_resize: sides multiples of 28, pixels within the bounds, the aspect kept."""
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise CropFailed(f"absolute aspect ratio must be smaller than {MAX_RATIO}, "
                         f"got {max(height, width) / min(height, width)}")
    h_bar, w_bar = max(FACTOR, _round_by(height, FACTOR)), max(FACTOR, _round_by(width, FACTOR))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar, w_bar = _floor_by(height / beta, FACTOR), _floor_by(width / beta, FACTOR)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = _ceil_by(height * beta, FACTOR), _ceil_by(width * beta, FACTOR)
    return h_bar, w_bar


def smart_nframes(total_frames: int, video_fps: float) -> int:
    """qwen-vl-utils' smart_nframes with LongVT's fps, min_frames and max_frames."""
    min_frames, max_frames = _ceil_by(MIN_FRAMES, FRAME_FACTOR), _floor_by(MAX_FRAMES, FRAME_FACTOR)
    nframes = total_frames / video_fps * FPS
    nframes = _floor_by(min(min(max(nframes, min_frames), max_frames), total_frames), FRAME_FACTOR)
    if not (FRAME_FACTOR <= nframes <= total_frames):
        raise CropFailed(f"nframes should in interval [{FRAME_FACTOR}, {total_frames}], but got {nframes}.")
    return nframes


def _linspace(start: float, end: float, n: int) -> list[int]:
    import torch  # the reference's own rounding: float32 linspace, then round half to even

    return [int(i) for i in torch.linspace(start, end, n).round().long().tolist()]


def clip_indices(start: float, end: float, count: int, rate: float) -> list[int]:
    """The source frames `fetch_video` keeps for [start, end]: decord's path, else torchvision's."""
    max_duration = count / rate
    start_frame = math.ceil(max(0.0, min(start, max_duration)) * rate)
    end_frame = min(math.floor(max(0.0, min(end, max_duration)) * rate), count - 1)
    if start_frame < end_frame:
        nframes = smart_nframes(end_frame - start_frame + 1, rate)
        return _linspace(start_frame, end_frame, nframes)
    # torchvision.io.read_video(start_pts=start, end_pts=end, pts_unit="sec"): frames timed in [start, end], and
    # the last frame before `start` when none is timed at `start` exactly (start > 0).
    times = [k / rate for k in range(count)]
    window = [k for k, t in enumerate(times) if start - _EPS <= t <= end + _EPS]
    if start > 0 and not any(abs(times[k] - start) <= _EPS for k in window):
        before = [k for k, t in enumerate(times) if t < start - _EPS]
        window = before[-1:] + window
    nframes = smart_nframes(len(window), rate)
    return [window[i] for i in _linspace(0, len(window) - 1, nframes)]


def resize_frames(frames: Sequence[Image.Image]) -> list[Image.Image]:
    """`fetch_video`'s resize: one smart_resize size for every frame, bicubic with antialias, uint8 kept."""
    import numpy as np
    import torch

    width, height = frames[0].size
    bound = max(min(VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS / len(frames) * FRAME_FACTOR), int(MIN_PIXELS * 1.05))
    new_h, new_w = smart_resize(height, width, MIN_PIXELS, min(MAX_PIXELS, bound))
    video = torch.from_numpy(np.stack([np.asarray(f.convert("RGB")) for f in frames])).permute(0, 3, 1, 2)
    # torchvision 0.21's tensor resize: float32, interpolate, clamp (bicubic), round, back to uint8.
    out = torch.nn.functional.interpolate(video.to(torch.float32), size=[new_h, new_w], mode="bicubic",
                                          align_corners=False, antialias=True)
    out = out.clamp(min=0, max=255).round().to(torch.uint8)
    return [Image.fromarray(frame.permute(1, 2, 0).contiguous().numpy()) for frame in out]


def check(args: CropVideoArgs) -> tuple[str, float, float]:
    """mcp_server.py's checks on the arguments alone, in its order."""
    if args.video_path is None:
        raise CropFailed("video_path parameter is required")
    if args.start_time is None:
        raise CropFailed("start_time parameter is required")
    if args.end_time is None:
        raise CropFailed("end_time parameter is required")
    path, start, end = args.video_path, args.start_time, args.end_time
    if not path or path.strip() == "":
        raise CropFailed("video_path cannot be empty")
    if start < 0:
        raise CropFailed(f"start_time must be non-negative, got {start}")
    if end <= start:
        raise CropFailed(f"end_time ({end}) must be greater than start_time ({start})")
    return path, start, end


def find_video(ctx: ToolContext, path: str) -> tuple[str, dict[str, float]] | None:
    """The session's video `path` names (its key, or a path ending in its key) and its rate and frame count."""
    for key in (path, path.rstrip("/").rsplit("/", 1)[-1]):
        text = ctx.texts.get(f"video:{key}")
        if text is not None:
            return key, json.loads(text)
    return None


class CropVideo(Tool):
    name = "crop_video"
    description = "Crop a video to a specified duration."
    Args = CropVideoArgs
    raw_arguments = True  # read as FastMCP reads them: a null is a wrong type there, not an argument left out

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        try:
            return ToolOutput(text=SUCCESS, images=self._crop(ctx, read_arguments(args)))
        except CropFailed as exc:
            return ToolOutput.failure(FAILED.format(exc), "invalid_arguments")

    def _crop(self, ctx: ToolContext, args: CropVideoArgs) -> list[Image.Image]:
        path, start, end = check(args)
        found = find_video(ctx, path)
        if found is None:
            raise CropFailed(f"Video file not found: {path}")
        key, info = found
        rate, count = float(info["fps"]), int(info["frames"])
        duration = count / rate if rate > 0 else 0
        if start >= duration:
            raise CropFailed(f"start_time ({start}s) exceeds video duration ({duration:.2f}s)")
        if end > duration:
            raise CropFailed(f"end_time ({end}s) exceeds video duration ({duration:.2f}s)")
        try:
            indices = clip_indices(start, end, count, rate)
            by_key: dict[str, ImageEntry] = {entry.key: entry for entry in ctx.images}
            frames = [by_key[f"{key}_frame_{i + 1}"].pixels for i in indices]
            return resize_frames(frames)
        except CropFailed as exc:
            raise CropFailed(f"Failed to process video {path}: {exc}") from None


def server_text(text: str, ok: bool) -> str | None:
    """What mcp_server.py itself answers over MCP: the frames alone, or FastMCP's error text."""
    return text.removeprefix(TRAINER_PREFIX) if not ok else None


PROFILES = (
    Profile("longvt", "LongVT: crop_video(video_path, start_time, end_time) over the session's video, frames as "
            "qwen-vl-utils' fetch_video samples them (1 fps, up to 128 frames of at most 224x224 pixels).",
            tools_by_name(CropVideo()), call_format=HERMES, keeps_every_frame=True, mcp_text=server_text),
)
