"""Profiles whose paper released no code, so no reward to serve (docs/rewards-profiles.md): asking for their reward
answers `no_reward` with the reason, rather than a reward invented from the paper's prose."""

from __future__ import annotations

WITHOUT_REWARD = {
    "mags-rl": "Mags-RL (arXiv 2605.27960) released no code (\"Code and weights will be released soon\"); no "
               "repository holds its reward",
    "imagent": "IMAgent (arXiv 2512.08980) released no code (\"Code and data will be released soon\"); no repository "
               "holds its reward",
}
