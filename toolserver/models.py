"""Wire models shared by the core and the adapters (HTTP, MCP, client).

These pydantic models are the contract of SPEC §2: field names here are the JSON field names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pybase64
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from toolserver.geometry import (
    QWEN_FACTOR,
    QWEN_MAX_PIXELS,
    QWEN_MAX_TOKENS,
    QWEN_MIN_PIXELS,
    QWEN_MIN_TOKENS,
    Coords,
    ViewRule,
)
from toolserver.reward_models import SessionReward

# A document's id (its `filename`): what ARM-Thinker's page files are named by, safe as a path component.
FILENAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class ViewSettings(BaseModel):
    """The resize the trainer applied before the model saw an image (used by `abs_view` coordinates).

    Defaults are qwen-vl-utils' (`factor` 28, 4..16384 tokens). A rule that gives a `factor` but no pixel
    bounds takes qwen-vl-utils' bounds for that factor: 4·factor² and 16384·factor² (token counts times the
    factor squared, as its `fetch_image` computes them), so `{"factor": 32}` is Qwen3-VL's rule.
    Groundlight: `{"factor": null, "max_long_side": 1024}`. MGPO: `{"prescale_max_pixels": 1003520,
    "prescale_min_pixels": 200704}`.
    """

    model_config = ConfigDict(extra="forbid")

    factor: int | None = Field(default=QWEN_FACTOR, ge=1, le=1024)
    min_pixels: int = Field(default=QWEN_MIN_PIXELS, ge=1)
    max_pixels: int = Field(default=QWEN_MAX_PIXELS, ge=1)
    max_long_side: int | None = Field(default=None, ge=1)
    prescale_max_pixels: int | None = Field(default=None, ge=1, description="MGPO's process_image cap")
    prescale_min_pixels: int | None = Field(default=None, ge=1, description="MGPO's process_image floor")
    downsample: int | None = Field(default=None, ge=2, le=64, description=(
        "After the prescale, each side floor-divided by this (VisionThink's downsampled first view: 2)"))

    @model_validator(mode="after")
    def _bounds(self) -> ViewSettings:
        if self.factor is not None:  # bounds not given: qwen-vl-utils' token counts for this factor
            if "min_pixels" not in self.model_fields_set:
                self.min_pixels = QWEN_MIN_TOKENS * self.factor * self.factor
            if "max_pixels" not in self.model_fields_set:
                self.max_pixels = QWEN_MAX_TOKENS * self.factor * self.factor
        if self.max_pixels < self.min_pixels:
            raise ValueError("max_pixels must be >= min_pixels")
        return self

    def rule(self) -> ViewRule:
        return ViewRule(self.factor, self.min_pixels, self.max_pixels, self.max_long_side,
                        self.prescale_max_pixels, self.prescale_min_pixels, self.downsample)


class OutputSettings(BaseModel):
    """How tool images come back: lossless PNG inline by default."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["png", "jpeg", "webp"] = "png"
    delivery: Literal["inline", "ref", "path", "shm"] = Field(default="inline", description=(
        "`inline`: the encoded image in the answer; `ref`: a URL to GET it; `path`: a file in the shared output "
        "directory; `shm`: its raw pixels in shared memory, for a trainer on this host (docs/delivery.md)."))


def _not_a_dot_segment(key: str) -> str:
    if key in (".", ".."):  # a URL path segment that clients (and browsers) normalise away: unreachable by GET
        raise ValueError(f"an image key cannot be {key!r}")
    return key


# An image key: it appears in URL paths (`/v1/sessions/{id}/images/{key}`).
ImageKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,128}$"), AfterValidator(_not_a_dot_segment)]


class ImageInput(BaseModel):
    """One image, or a video whose sampled frames become images: exactly one of `data` (base64 or data:
    URI), `path` (under an allowed root) or `url`.

    A video (MP4/MOV, WebM, MKV) is sampled at `frames_per_second` (default 2) and at most `max_frames`
    frames (default 32; evenly spread when the rate would give more); `max_frames` alone takes that many
    frames evenly spread. Its frames are keyed `<key>_frame_1`, `<key>_frame_2`, … when `key` is given.
    The two sampling fields are ignored for images."""

    model_config = ConfigDict(extra="forbid")

    data: str | None = None
    path: str | None = None
    url: str | None = None
    key: ImageKey | None = None
    frames_per_second: float | None = Field(default=None, gt=0, le=120, description="Videos: frames taken per second.")
    max_frames: int | None = Field(default=None, ge=1, description="Videos: the most frames to take.")

    @model_validator(mode="after")
    def _exactly_one(self) -> ImageInput:
        given = [name for name in ("data", "path", "url") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'data', 'path' or 'url'")
        return self


class SessionSettings(BaseModel):
    """Fixed for the life of a session."""

    model_config = ConfigDict(extra="forbid")

    profile: str = "default"
    coords: Coords | None = Field(
        default=None, description="Coordinate convention of the model; default: the profile's (rel1000)."
    )
    view: ViewSettings | None = Field(default=None, description="Model-view resize rule; default: the profile's.")
    output: OutputSettings = Field(default_factory=OutputSettings)
    ttl_s: float | None = Field(default=None, gt=0, description="Idle time before expiry (server default 3600).")
    max_tool_calls: int | None = Field(default=None, ge=0, description="Overrides the profile's call limit.")
    input_form: Literal["original", "view"] = Field(default="original", description=(
        "`view`: input images are uploaded as the model already sees them (the trainer resized them by the "
        "session's view rule, e.g. verl's dataset, and sends them as its agent loop does): each one's size must be "
        "one the rule produces, and the server neither resizes nor re-encodes them. `original`: the server "
        "derives the model's view from the original."))
    image_marker: Literal["vision_tokens", "image_tag"] = Field(default="vision_tokens", description=(
        "How `/act`'s `prompt` writes each image: `vision_tokens`, as the profile's reference rollout appends it to "
        "the token stream before its processor expands it (Qwen-VL's `<|vision_start|><|image_pad|><|vision_end|>`); "
        "`image_tag`, a bare `<image>`, for a trainer that puts in its own tokens (verl-tool's agent loop)."))


class CreateSessionRequest(SessionSettings):
    images: list[ImageInput] = Field(default_factory=list)
    texts: dict[str, str] | list[str] = Field(default_factory=dict)


class ImageInfo(BaseModel):
    key: str
    index: int
    width: int
    height: int
    view_width: int | None = None
    view_height: int | None = None
    view_error: str | None = None
    origin: str = "input"


class TextInfo(BaseModel):
    key: str
    length: int


class VideoInfo(BaseModel):
    """A video taken in as frames: which images it became, and when each frame was on screen."""

    keys: list[str] = Field(description="The frames' image keys, in time order.")
    timestamps_s: list[float] = Field(description="Each frame's own timestamp in the video, seconds.")
    duration_s: float
    source_fps: float | None = Field(description="The video's average frame rate, when it declares one.")
    width: int
    height: int
    container: str = Field(description="`mp4` (MP4, MOV) or `matroska` (WebM, MKV).")
    codec: str


class SessionCreated(BaseModel):
    session_id: str
    profile: str
    images: list[ImageInfo]
    texts: list[str]
    expires_in_s: float
    videos: list[VideoInfo] = Field(default_factory=list, description="Videos among the inputs, as frames.")


class SessionInfo(BaseModel):
    session_id: str
    settings: SessionSettings
    images: list[ImageInfo]
    texts: list[TextInfo]
    tool_calls: int
    bytes_held: int
    expires_in_s: float


class TrajectoryImage(BaseModel):
    key: str
    index: int
    width: int
    height: int
    origin: str


class CallRecord(BaseModel):
    """One tool call as the session's log keeps it (the last 1,000 calls of a session)."""

    seq: int = Field(description="1-based position among every call the session made (dropped ones included)")
    tool: str
    arguments: Any = Field(description="The arguments as received: an object, or the string the model wrote")
    ok: bool
    error_code: str | None
    text: str = Field(description="What the model was shown")
    keys: list[str] = Field(description="Images the call produced")
    meta: dict[str, Any] = Field(description="The tool's meta: box_original and the rest of its geometry")
    started_at: float = Field(description="Unix time the call started")
    duration_ms: float


class Trajectory(BaseModel):
    session_id: str
    profile: str
    images: list[TrajectoryImage]
    calls: list[CallRecord]
    dropped_calls: int = Field(description="Older calls no longer kept (the log keeps the last 1,000)")
    rewards: list[SessionReward] = Field(default_factory=list, description="Rewards scored for it (this replica).")


class SessionSummaryInfo(BaseModel):
    session_id: str
    profile: str
    images: int
    calls: int
    age_s: float | None


class SessionList(BaseModel):
    sessions: list[SessionSummaryInfo]
    total: int
    offset: int
    limit: int


class AddImagesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    images: list[ImageInput]


class AddedImages(BaseModel):
    images: list[ImageInfo]
    videos: list[VideoInfo] = Field(default_factory=list, description="Videos among the inputs, as frames.")


class AddTextsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    texts: dict[str, str] | list[str]


class AddedTexts(BaseModel):
    texts: list[str]


class ShmHandle(BaseModel):
    """Where `shm` delivery left an image's raw pixels (`mode` as Pillow names it, row after row, `nbytes` in all) in
    the file `path` on the server's host; the file goes with its session, or at `expires_at` (Unix time)."""

    path: str
    width: int
    height: int
    mode: str
    nbytes: int
    expires_at: float


class ResultImage(BaseModel):
    key: str
    index: int
    width: int
    height: int
    mime: str
    data: str | bytes | None = Field(default=None, description=(
        "The encoded image, for `inline` delivery: base64 in a JSON answer, the bytes themselves in an "
        "`application/msgpack` answer (`Accept: application/msgpack` on a tool call). In an `/act` answer an image "
        "is carried once: in `observation` (as a data URL), and `data` here is null."))
    url: str | None = Field(default=None, description="GET it, for `ref` delivery")
    path: str | None = Field(default=None, description="a file in the shared directory, for `path` delivery")
    shm: ShmHandle | None = Field(default=None, description="the raw pixels in shared memory, for `shm` delivery")

    def content(self) -> bytes:
        """The encoded image's bytes, whichever way they travelled (inline delivery only)."""
        if self.data is None:
            raise ValueError(f"image {self.key} was not delivered inline (see its url or path)")
        return self.data if isinstance(self.data, bytes) else pybase64.b64decode(self.data, validate=True)


class ErrorInfo(BaseModel):
    code: str
    message: str


class ToolResult(BaseModel):
    """One tool call's outcome. `ok:false` is a tool-level failure the model can read and fix."""

    ok: bool
    tool: str
    text: str
    images: list[ResultImage] = Field(default_factory=list)
    error: ErrorInfo | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class FunctionCall(BaseModel):
    name: str
    arguments: str | dict[str, Any] = "{}"


class OpenAIToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ToolCallsRequest(BaseModel):
    tool_calls: list[OpenAIToolCall]
    image_message: Literal["tool", "user"] = Field(
        default="tool",
        description="`tool`: images inside each tool message (Qwen/verl templates); `user`: text-only tool "
        "messages followed by one user message with the images (OpenAI's own schema).",
    )


class ToolCallsResponse(BaseModel):
    messages: list[dict[str, Any]]
    results: list[ToolResult]


class ActRequest(BaseModel):
    text: str = Field(description="The model's raw output.")
    # One of `auto` and the registered call formats (`toolserver.formats.FORMATS`): checked by the core, and
    # listed as this field's enum in the OpenAPI document when the app is built (plugins' formats included).
    format: str = Field(default="auto", description="`auto`: the session profile's own format.")


class ActResponse(BaseModel):
    format: str
    calls: list[dict[str, Any]]
    results: list[ToolResult]
    observation: list[dict[str, Any]] = Field(
        description="The messages to append, rendered the way the profile's system renders tool output.")
    done: bool = Field(default=False, description=(
        "The environment ends the episode here: the text held no tool call (DeepEyes: or a non-empty answer)."))
    prompt: str | None = Field(default=None, description=(
        "Systems that append raw text to the token stream (DeepEyes, Pixel-Reasoner, Mini-o3, …): the observation "
        "exactly as their rollout appends it, each image of `results`, in order, written as the session's "
        "`image_marker` says (by default Qwen-VL's vision tokens, as the rollout writes them)."))


# -- batch validation (/v1/validate) -------------------------------------------------------------
class ValidateItem(BaseModel):
    """One check. `params` and `text` are checked per item, so one bad item never fails the batch."""

    model_config = ConfigDict(extra="forbid")
    tool: str = Field(description="A validator name, e.g. `check_whether_response_word_count_in_range`.")
    params: Any = Field(default_factory=dict, description="The validator's parameters, without `response`.")
    text: Any = Field(description="The text to check.")


class ValidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[ValidateItem]


class ValidateResult(BaseModel):
    ok: bool
    result: bool | None = None
    text: str | None = Field(default=None, description="`Check result: True` / `Check result: False`.")
    error: ErrorInfo | None = None


class ValidateResponse(BaseModel):
    results: list[ValidateResult]


# -- documents (§5) ---------------------------------------------------------------------------------
class DocumentInfo(BaseModel):
    """A document in the library and where its ingestion stands."""

    filename: str = Field(description="The document id tools are called with.")
    kind: Literal["pdf", "images", "mounted"] = "pdf"
    status: Literal["queued", "ingesting", "partial", "ready", "failed"] = Field(
        description="`partial`: ingestion stopped midway (what was ingested is kept and searchable); "
                    "ingesting the same file again resumes it.")
    pages: int = Field(description="Pages in the source.")
    pages_done: int = Field(description="Pages rendered, embedded and stored so far.")
    sha256: str = ""
    has_text: bool = Field(default=False, description="Whether any page has a text layer.")
    embedded: list[str] = Field(default_factory=list, description="Embedding spaces stored: `text`, `clip`.")
    unchanged: bool = Field(default=False, description="This ingestion found the same document already complete.")
    error: str | None = None
    updated_at: float = 0.0


class IngestPathRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A PDF, or a folder of `{filename}_{page}.{ext}` images, under an allowed root.")
    filename: str | None = Field(default=None, pattern=FILENAME_PATTERN,
                                 description="The document id (default: the file's stem).")
