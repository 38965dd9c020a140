"""Wire models of the reward doors (`POST /v1/sessions/{id}/reward`, `POST /v1/rewards`), re-exported by
`toolserver.models` (kept apart for its length)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class RewardCall(BaseModel):
    """A tool call as the trainer recorded it (the fields of the call log that rewards read)."""

    tool: str
    arguments: Any = None
    ok: bool = True
    error_code: str | None = None
    text: str = Field(default="", description="What the model was shown.")
    images: int = Field(default=0, ge=0, description="Images the call returned to the model.")
    meta: dict[str, Any] = Field(default_factory=dict)


class RewardEpisodeFields(BaseModel):
    response: str = Field(default="", description=(
        "The text the profile's reward reads (docs/rewards.md): the model's final answer turn, or the decoded "
        "response of the whole episode where the reference scores that. Empty: rebuilt from `turns` and the calls "
        "where the profile says how."))
    ground_truth: Any = Field(default=None, description="The reference answer, as the reference's data holds it.")
    turns: list[str] = Field(default_factory=list, description="The assistant turns' raw texts, oldest first, the "
                             "final one included (toolserver does not see turns without a call).")
    question: str | None = Field(default=None, description="The question, for rewards whose judge reads it.")
    extra: dict[str, Any] = Field(default_factory=dict, description=(
        "Reference-specific fields (e.g. `data_source`, which picks among a reference's reward functions)."))
    truncated: bool = Field(default=False, description="The trainer cut the episode (turn or length limit).")


class SessionRewardRequest(RewardEpisodeFields):
    """A session's reward: its calls come from its call log."""


class RewardItem(RewardEpisodeFields):
    calls: list[RewardCall] = Field(default_factory=list, description="The episode's tool calls, oldest first.")
    group: str | None = Field(default=None, description=(
        "Items with the same group are the rollouts of one prompt (a reward with group terms scores them "
        "together); without it, the whole request is one group."))


class RewardsRequest(BaseModel):
    profile: str
    items: list[RewardItem]


class RewardError(BaseModel):
    code: str
    message: str


class RewardScore(BaseModel):
    ok: bool = True
    total: float | None = Field(default=None, description="The reward, as the reference computes it.")
    terms: dict[str, float] = Field(default_factory=dict, description="Each term's raw value, by name.")
    weights: dict[str, float] = Field(default_factory=dict, description="The training recipe's weights.")
    finished: bool = Field(default=True, description="The episode ended as the reference ends it.")
    violation: str | None = Field(default=None, description=(
        "The rule a rule-breaking trajectory broke (its total is what the reference gives it)."))
    details: dict[str, Any] = Field(default_factory=dict, description="The extracted answer, the judge's verdict…")
    error: RewardError | None = None


class SessionReward(RewardScore):
    session_id: str
    profile: str
    source: str = Field(description="Where the reference computes it: `owner/repo/path@commit`.")
    scored_at: float = Field(default=0.0, description="Unix time it was scored.")


class RewardsResponse(BaseModel):
    profile: str
    source: str
    results: list[RewardScore]
