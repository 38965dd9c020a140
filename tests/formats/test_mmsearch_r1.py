"""MMSearch-R1's call format (`toolserver/formats/mmsearch_r1.py`): a turn read as its rollout reads a response
(the end-anchored image-search pattern, the last `<text_search>` query, `<answer>` ends); the texts its searches
return are checked against the golden sessions in tests/profiles/test_mmsearch_r1.py."""

from __future__ import annotations

from toolserver.formats.mmsearch_r1 import MMSEARCH_R1, search_of


def test_the_turn_is_read_as_the_rollout_reads_it():
    assert search_of("why <search><img></search>\n<|im_end|>") == ("image", None)
    assert search_of("<text_search>a</text_search><text_search> b </text_search><|im_end|>") == ("text", " b ")
    assert search_of("<text_search></text_search>") == ("text", None)
    assert search_of("<text_search>a\nb</text_search>") is None  # neither pattern crosses a line
    assert search_of("<search><img></search> and more") is None
    assert MMSEARCH_R1.parse("<answer>x</answer>").done is True
    parsed = MMSEARCH_R1.parse("<text_search>q</text_search>")
    assert parsed.done is False and parsed.calls[0].arguments == {"query": "q"}
