"""OpenEnv's wire types, with toolserver's fields: the action a step takes, what reset takes, the observation and
state sent back, the WebSocket messages (for the documentation) and the error codes.

OpenEnv's own types (meta-pytorch/OpenEnv @ 685de411, `src/openenv/core/env_server/types.py`) are the base: an
action refuses unknown fields and carries `metadata`; an observation has `done`, `reward` and `metadata`; a state
has `episode_id` and `step_count` and allows more. Written out here rather than imported, so that serving OpenEnv
does not need `openenv-core` (and its gradio) on the server.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from toolserver.errors import BadRequest
from toolserver.models import CreateSessionRequest, ImageInput, OutputSettings, SessionSettings
from toolserver.profiles import get_profile


class ErrorCode(StrEnum):
    """OpenEnv's `WSErrorCode`s."""

    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"


def _tool_names_as_enum(schema: dict[str, Any]) -> None:
    """`tool_name`'s names as an `enum` even when there is one (pydantic writes a one-value Literal as `const`)."""
    for option in schema.get("properties", {}).get("tool_name", {}).get("anyOf", []):
        if "const" in option:
            option["enum"] = [option.pop("const")]


class EpisodeAction(BaseModel):
    """One step: the model's raw turn (`text`), run through the profile's call format as `/act` runs it, or one
    structured call (`tool_name` and `arguments`), run as `/v1/sessions/{id}/tools/{name}` runs it."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_tool_names_as_enum)

    text: str | None = Field(default=None, description="The model's raw output for this turn.")
    format: str = Field(default="auto", description="With `text`: the call format (`auto`: the profile's own).")
    tool_name: str | None = Field(default=None, description="A tool of the profile (or one of its aliases).")
    arguments: dict[str, Any] | str = Field(default_factory=dict, description=(
        "With `tool_name`: the arguments, an object or the JSON text the model wrote (read the profile's way)."))
    metadata: dict[str, Any] = Field(default_factory=dict, description="OpenEnv's action metadata (kept, unused).")

    @model_validator(mode="after")
    def _one_kind(self) -> EpisodeAction:
        if (self.text is None) == (self.tool_name is None):
            raise ValueError("give exactly one of 'text' (a raw model turn) or 'tool_name' (a structured call)")
        return self


@lru_cache(maxsize=256)
def action_model(profile: str) -> type[EpisodeAction]:
    """The action model of one profile: `tool_name` is one of its tools or aliases (so `/schema` lists them, and
    an unknown name is a validation error)."""
    found = get_profile(profile)
    names = tuple([*found.tools, *found.aliases])
    kind: Any = Literal[names] | None if names else None  # type: ignore[valid-type]
    tool_name: Any = (kind, Field(default=None, description=EpisodeAction.model_fields["tool_name"].description))
    model: type[EpisodeAction] = create_model(f"Action_{found.name}", __base__=EpisodeAction, tool_name=tool_name)
    return model


class EpisodeSettings(SessionSettings):
    """Session settings a reset may give; the profile is the URL's and images come back inline."""

    profile: str | None = Field(default=None, description="The URL's profile (another one is refused).")  # type: ignore[assignment]


class RewardSpec(BaseModel):
    """What the profile's reward needs beyond the episode's turns and calls."""

    model_config = ConfigDict(extra="forbid")

    ground_truth: Any = Field(description="The reference answer, as the reference's data holds it.")
    question: str | None = Field(default=None, description="For rewards whose judge reads the question.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Reference-specific fields (`data_source`…).")


class ResetInputs(BaseModel):
    """What a reset takes: the episode's images and texts, OpenEnv's `seed` and `episode_id`, session settings, and
    any other field, a dataset column, kept with the episode (named in the observation's metadata, returned by
    `state`)."""

    model_config = ConfigDict(extra="allow")

    images: list[str | ImageInput] = Field(default_factory=list, description=(
        "Data URLs, http(s) URLs (when the server fetches URLs) or server paths under an allowed root, or "
        "`{data|path|url, key, ...}` objects as the REST API takes them."))
    texts: dict[str, str] | list[str] = Field(default_factory=dict, description="Texts for the session.")
    episode_id: str | None = Field(default=None, max_length=255, description="OpenEnv's episode id (default: new).")
    seed: int | None = Field(default=None, ge=0, description="OpenEnv's seed: kept in the state (the tools are "
                             "deterministic).")
    settings: EpisodeSettings | None = Field(default=None, description="Session settings (coords, view, "
                                             "max_tool_calls, input_form, output format, ttl_s).")
    reward: RewardSpec | None = Field(default=None, description=(
        "Score the episode with its profile's reward (docs/rewards.md): each step before the end gets 0.0 and the "
        "step that ends it the episode's reward, as the reference assigns them; without it `reward` stays null."))

    @property
    def columns(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def session_request(self, profile: str) -> CreateSessionRequest:
        settings = self.settings or EpisodeSettings()
        if settings.profile not in (None, profile):
            raise BadRequest(f"this endpoint serves profile {profile!r}, not {settings.profile!r}",
                             code="profile_mismatch")
        output = OutputSettings(format=settings.output.format, delivery="inline")  # observations carry the images
        fields = settings.model_dump(exclude={"profile", "output"})
        return CreateSessionRequest(**fields, profile=profile, output=output,
                                    images=[_image_input(x) for x in self.images], texts=self.texts)


def _image_input(image: str | ImageInput) -> ImageInput:
    if isinstance(image, ImageInput):
        return image
    if image.startswith("data:"):
        return ImageInput(data=image)
    if image.startswith(("http://", "https://")):
        return ImageInput(url=image)
    return ImageInput(path=image)


class StepRequest(ResetInputs):
    """OpenEnv's one-shot step: the action, and the inputs of the fresh episode it runs in."""

    action: dict[str, Any] = Field(description="The action (see the `action` schema of `/schema`).")
    timeout_s: float | None = Field(default=None, gt=0, description="OpenEnv's; the server's tool timeout applies.")
    request_id: str | None = Field(default=None, max_length=255, description="OpenEnv's request id (echoed in the "
                                   "observation's metadata).")


class EpisodeObservation(BaseModel):
    """What a reset or a step returns. Over the wire `done` and `reward` sit beside the observation (OpenEnv's
    `{"observation", "reward", "done"}`); `metadata` stays inside it, where OpenEnv's clients read it."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(default_factory=list, description=(
        "The messages to append, rendered the way the profile's system renders tool output; each image once, as a "
        "data URL. Empty after a reset."))
    prompt: str | None = Field(default=None, description=(
        "Systems that append raw text to the token stream (DeepEyes, Pixel-Reasoner): the observation exactly as "
        "their rollouts append it, each image of `messages`, in order, marked by Qwen-VL's vision tokens (or by "
        "`<image>` when the reset's settings ask for `image_marker: image_tag`)."))
    done: bool = Field(default=False, description="The profile's own rule ends the episode here.")
    reward: float | None = Field(default=None, description=(
        "With a reset's `reward`: 0.0 before the end, the profile's reward at the step that ends the episode (its "
        "terms in `metadata.reward`); null otherwise."))
    metadata: dict[str, Any] = Field(default_factory=dict, description=(
        "`session_id`, `profile`, `episode_id`; after a reset the session's `images`, `texts` and the `columns` "
        "kept; after a step `step`, `format`, `calls` and `results` (each image's bytes are in `messages`)."))

    def wire(self) -> dict[str, Any]:
        """OpenEnv's `serialize_observation` (`openenv` 0.10): `metadata` in the observation, and also beside it,
        where 0.10's clients read `StepResult.metadata`."""
        out = {"observation": self.model_dump(exclude={"done", "reward"}), "reward": self.reward, "done": self.done}
        return {**out, "metadata": self.metadata} if self.metadata else out


class EpisodeState(BaseModel):
    """OpenEnv's state (extra fields allowed), with the episode's session and its columns."""

    model_config = ConfigDict(extra="allow")

    episode_id: str | None = None
    step_count: int = Field(default=0, ge=0)
    session_id: str | None = None
    profile: str | None = None
    seed: int | None = None
    columns: dict[str, Any] = Field(default_factory=dict)
    images: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: int = 0


class EnvironmentMetadata(BaseModel):
    """OpenEnv's `/metadata`."""

    name: str
    description: str
    readme_content: str | None = None
    version: str | None = None
    author: str | None = None
    documentation_url: str | None = None


# -- WebSocket messages, for the documentation (`/docs`); the endpoint reads them by hand ----------------------
class ResetMessage(BaseModel):
    type: Literal["reset"]
    data: ResetInputs = Field(default_factory=ResetInputs)


class StepMessage(BaseModel):
    type: Literal["step"]
    data: EpisodeAction


class StateMessage(BaseModel):
    type: Literal["state"]


class CloseMessage(BaseModel):
    type: Literal["close"]


class ObservationData(BaseModel):
    observation: dict[str, Any] = Field(description="`messages`, `prompt` and `metadata` of an EpisodeObservation.")
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = Field(default=None, description="The observation's `metadata` again (as "
                                            "`openenv` 0.10 sends it).")


class ObservationReply(BaseModel):
    type: Literal["observation"]
    data: ObservationData


class StateReply(BaseModel):
    type: Literal["state"]
    data: EpisodeState


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="allow")
    message: str
    code: ErrorCode
    errors: list[dict[str, Any]] | None = Field(default=None, description="VALIDATION_ERROR: pydantic's list.")
    active_sessions: int | None = Field(default=None, description="CAPACITY_REACHED: episodes open.")
    max_sessions: int | None = Field(default=None, description="CAPACITY_REACHED: the bound.")
    toolserver_code: str | None = Field(default=None, description="The service's own error code, when it has one "
                                        "(e.g. `invalid_image`, `session_gone`).")


class ErrorReply(BaseModel):
    type: Literal["error"]
    data: ErrorData


def error(message: str, code: ErrorCode, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": str(code), **extra}}


def validation_error(exc: ValidationError) -> dict[str, Any]:
    """OpenEnv's answer to a message that does not validate: "Invalid message" and pydantic's errors."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    return error("Invalid message", ErrorCode.VALIDATION_ERROR, errors=errors)
