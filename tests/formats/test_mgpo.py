"""Call format `mgpo`: fenced ```json blocks of bbox_2d objects, the first valid block winning."""

from toolserver.formats import parse


def test_mgpo_first_valid_block_wins():
    text = ('```json\n[{"bbox_2d": [1, 2, 3.5, 4], "label": "a"}]\n```\n'
            '```json\n[{"bbox_2d": [10, 20, 30, 40], "label": "b"}, {"bbox_2d": [0, 0, 1, 1], "label": "c"}]\n```')
    parsed = parse(text, "mgpo")
    assert parsed.calls[0].arguments == {"bbox_2d": [10, 20, 30, 40], "label": "b"}
    # No newline after ```json: not MGPO's fence, so the original image comes back.
    assert parse('```json [{"bbox_2d": [1, 2, 3, 4], "label": "a"}]\n```', "mgpo").calls[0].arguments["bbox_2d"] is None
