"""Call format `mini-o3`: a turn with a <grounding> block is one call of the profile's `grounding` tool, holding the
whole turn (the tool reads it with the rollout's pattern: tests/profiles/test_mini_o3.py)."""

from toolserver.formats import parse


def test_mini_o3_grounding():
    text = '<think>x</think><grounding>{"bbox_2d": [0.1, 0.2, 0.5, 0.6], "source": "observation_1"}</grounding>'
    parsed = parse(text, "mini-o3")
    assert [(c.name, c.arguments) for c in parsed.calls] == [("grounding", {"turn": text})] and parsed.done is False
    broken = parse("<grounding>{bbox}</grounding>", "mini-o3")
    assert broken.calls[0].arguments == {"turn": "<grounding>{bbox}</grounding>"}  # the tool answers in its words
    assert parse("<grounding>unclosed", "mini-o3").done is True
