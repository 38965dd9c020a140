"""Rewards: each profile's reward as its reference computes it, registered under the profile's name.

One module per profile (or family of profiles), like `toolserver.profiles`. A module exports `REWARDS`, a tuple of
`Reward`s, and may export `WITHOUT_REWARD`, `{profile: why}` for a profile whose reference ships no reward code:
that profile is served none, and asking for it says why (docs/rewards.md). `toolserver.rewards.base` has the
contract; `toolserver.rewards.judge` the OpenAI-compatible judge client.
"""

from __future__ import annotations

from types import ModuleType

from toolserver.errors import BadRequest
from toolserver.registry import BUILTIN, Registry
from toolserver.rewards import (
    arm_thinker,
    chain_of_focus,
    codedance,
    deepeyes,
    deepeyes_v2,
    groundlight,
    mgpo,
    mini_o3,
    nemo_gym,
    pixel_reasoner,
    pyvision_rl,
    thyme,
    unreleased,
    visionthink,
)
from toolserver.rewards.base import (
    Episode,
    Judge,
    JudgeNotConfigured,
    Reward,
    RewardInputError,
    RewardResult,
    RuleReward,
    Step,
)

__all__ = ["REWARDS", "WITHOUT_REWARD", "Episode", "Judge", "JudgeNotConfigured", "Reward", "RewardInputError",
           "RewardResult", "RuleReward", "Step", "get_reward", "register_reward"]

REWARDS: Registry[Reward] = Registry("reward", lambda reward: reward.profile)
WITHOUT_REWARD: dict[str, str] = {}  # profile -> why its reference has no reward to serve

# The built-in reward modules, one line each (added in any order).
BUILTIN_MODULES: tuple[ModuleType, ...] = (
    deepeyes,
    arm_thinker,
    mini_o3,
    chain_of_focus,
    pixel_reasoner,
    codedance,
    deepeyes_v2,
    groundlight,
    mgpo,
    nemo_gym,
    pyvision_rl,
    thyme,
    unreleased,
    visionthink,
)


def register_reward(reward: Reward, source: str = BUILTIN) -> Reward:
    if not isinstance(reward, Reward):
        raise TypeError(f"a reward must be a Reward instance, got {type(reward).__name__}")
    if not reward.profile:
        raise ValueError(f"{type(reward).__name__} names no profile")
    return REWARDS.register(reward, source)


for _module in BUILTIN_MODULES:
    for _reward in getattr(_module, "REWARDS", ()):
        register_reward(_reward)
    WITHOUT_REWARD.update(getattr(_module, "WITHOUT_REWARD", {}))


def get_reward(profile: str) -> Reward:
    found = REWARDS.get(profile)
    if found is not None:
        return found
    if profile in WITHOUT_REWARD:
        raise BadRequest(f"profile {profile!r} serves no reward: {WITHOUT_REWARD[profile]}", code="no_reward")
    raise BadRequest(f"no reward for profile {profile!r}; rewards: {', '.join(REWARDS) or 'none'}",
                     code="no_reward")
