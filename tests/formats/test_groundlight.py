"""Call format `groundlight`: <tool> blocks of `key: value` lines (r1_vlm)."""

from toolserver.formats import parse


def test_groundlight_key_values():
    parsed = parse("<think>hm</think>\n<tool>\n  name: zoom  \nkeypoint: [23, 44]\n</tool>\ntrailing", "groundlight")
    assert [(c.name, c.arguments) for c in parsed.calls] == [("zoom", {"keypoint": [23, 44]})]
    dup = parse("<tool>\nname: zoom\nkeypoint: [1, 1]\nkeypoint: [2, 2]\n</tool>", "groundlight")
    assert dup.calls[0].arguments == {"keypoint": [2, 2]}  # later keys overwrite
