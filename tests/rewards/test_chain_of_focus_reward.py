"""Chain-of-Focus' reward: goldens recorded by running zoomin_reward3.py against a local judge, scored exactly;
the decoded text rebuilt from the turns and the calls."""

from __future__ import annotations

import pytest

from tests.rewards.helpers import check_goldens, episode_of, load_golden
from toolserver.profiles import get_profile
from toolserver.rewards.text import with_tool_turns

GOLDEN = load_golden("chain-of-focus")


@pytest.mark.slow  # every judged golden against a local judge: in .ci/run's slow leg
def test_goldens_scored_exactly() -> None:
    assert check_goldens("chain-of-focus") == len(GOLDEN["cases"]) >= 10


def test_decoded_text_rebuilt_from_turns_and_calls() -> None:
    call_format = get_profile("chain-of-focus").format
    for case in GOLDEN["cases"]:
        assert with_tool_turns(episode_of("chain-of-focus", case["episode"]), call_format) == \
            case["episode"]["decoded"], case["name"]
