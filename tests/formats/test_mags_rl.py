"""Call format `mags-rl`: <zoom>[[x1, y1, x2, y2], ...]</zoom> and its "Zoom failed" errors."""

from toolserver.formats import parse


def test_mags_rl_grammar():
    parsed = parse("<think>x <zoom>[[1, 2, 3, 4], [5, 6, 7, 8]]</zoom></think>", "mags-rl")
    assert parsed.calls[0].arguments == {"boxes": [[1, 2, 3, 4], [5, 6, 7, 8]]}
    for bad in ("<zoom>[[1, 2, 3, 4]</zoom>", "<zoom>[]</zoom>", "<zoom>[1, 2, 3, 4]</zoom>"):
        assert parse(bad, "mags-rl").errors[0].startswith("Zoom failed: cannot read the boxes"), bad
    assert parse("<answer>3</answer>", "mags-rl").errors == []
