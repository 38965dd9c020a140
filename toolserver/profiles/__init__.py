"""Profiles: one module per research system, each holding its `Profile`s and its own tool classes.

`PROFILES` is the registry: the built-in profiles below, in this order, and those of installed plugins
(`toolserver.plugins`), each remembered with where it came from. `default` is the canonical toolset; every
other built-in profile reproduces one paper's tool environment and is frozen (it gains none of our tools).
"""

from __future__ import annotations

from toolserver.errors import BadRequest
from toolserver.formats import FORMATS, register_format
from toolserver.profiles import (
    arm_thinker,
    chain_of_focus,
    codedance,
    deepeyes,
    deepeyes_v2,
    default,
    groundlight,
    imagent,
    longvt,
    mags_rl,
    mgpo,
    mini_o3,
    mmsearch_r1,
    nemo_gym,
    openthinkimg,
    pixel_reasoner,
    pyvision_rl,
    qwen3_vl,
    thyme,
    visionthink,
    vrag_rl,
)
from toolserver.profiles.base import Alpha, Profile, ProfileError
from toolserver.registry import BUILTIN, Registry

__all__ = ["BUILTIN_MODULES", "PROFILES", "Alpha", "Profile", "ProfileError", "get_profile", "register_profile"]

# The built-in systems, in the order `/v1/profiles` lists them.
BUILTIN_MODULES = (default, arm_thinker, qwen3_vl, groundlight, mgpo, imagent, deepeyes, pixel_reasoner, mags_rl,
                   pyvision_rl, deepeyes_v2, thyme, mini_o3, chain_of_focus, visionthink, nemo_gym, codedance,
                   vrag_rl, longvt, mmsearch_r1, openthinkimg)

PROFILES: Registry[Profile] = Registry("profile", lambda profile: profile.name)


def register_profile(profile: Profile, source: str = BUILTIN) -> Profile:
    if not isinstance(profile, Profile):
        raise TypeError(f"a profile must be a Profile instance, got {type(profile).__name__}")
    return PROFILES.register(profile, source)


for _module in BUILTIN_MODULES:
    for _profile in _module.PROFILES:
        if FORMATS.get(_profile.format.name) is None:  # an environment module's own call format
            register_format(_profile.format)
        register_profile(_profile)


def get_profile(name: str) -> Profile:
    found = PROFILES.get(name)
    if found is None:
        raise BadRequest(f"unknown profile {name!r}; profiles: {', '.join(PROFILES)}", code="unknown_profile")
    return found
