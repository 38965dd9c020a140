"""Call format `mini-o3`: <grounding> JSON blocks read as zoom_in calls."""

from toolserver.formats import parse


def test_mini_o3_grounding():
    parsed = parse('<grounding>{"bbox_2d": [0.1, 0.2, 0.5, 0.6], "source": "observation_1"}</grounding>', "mini-o3")
    assert parsed.calls[0].arguments == {"image": "observation_1", "bbox_2d": [0.1, 0.2, 0.5, 0.6]}
    bad = parse("<grounding>{bbox}</grounding>", "mini-o3")
    assert bad.errors[0].startswith("ERROR occurs during grounding. Error Information:")
