"""VRAG-RL's golden sessions (scripts/goldens/record_vrag_rl.py runs VRAG's own rollout code over them; the tests run
them through `/act`): a corpus of three document pages, each a caption and one of the test photos, searched by this
server's library (BM25 over the captions: the settings below load no embedding model), and the model turns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PAGES = [  # (caption, photo): the captions make the lexical ranking decide
    ("Dragonfly wings resting on a green stem near the pond, insect field notes.", "Dragonfly_by_Bolly.jpg"),
    ("Ladybird beetle insect with red shell and black spots on a leaf.", "LadyBird.jpg"),
    ("Bridge over the river at dusk, steel arches and city lights.", "Bridge_by_Sander_Klootwijk.jpg"),
]
LIBRARY_SETTINGS: dict[str, Any] = {"clip_model": "", "text_model": "", "doc_page_long_side": 1200,
                                    "doc_warm_up": False, "doc_batch_pages": 4}
DOCUMENT = "field_guide"


def make_corpus_pdf(path: Path, photos: Path) -> Path:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(path), pagesize=A4, invariant=True)
    for caption, photo in PAGES:
        pdf.setFont("Helvetica", 14)
        pdf.drawString(50, 790, caption)
        pdf.drawImage(str(photos / photo), 50, 200, width=495, height=560, preserveAspectRatio=True)
        pdf.showPage()
    pdf.save()
    return path


def turn(tag: str, content: str, think: str = "I need to look.") -> str:
    return f"<think>{think}</think>\n<{tag}>{content}</{tag}>"


ANSWER = turn("answer", "a dragonfly")
SESSIONS: dict[str, list[str]] = {
    # a search, a crop, and a second crop scaled by the first crop's size (the rollout's quirk)
    "search_crop_crop": [turn("search", "dragonfly wings"), turn("bbox", "[60, 80, 400, 500]"),
                         turn("bbox", "[10, 20, 200, 150]"), ANSWER],
    # the same query twice: the second search shows the next page; the crop cuts that page
    "search_twice_then_crop": [turn("search", "insect"), turn("search", "insect"), turn("bbox", "[0, 0, 300, 200]"),
                               ANSWER],
    # what the rollout refuses, and what it lets through
    "invalid_actions": ["I think the answer is near.", turn("bbox", "[10, 10, 100, 100]"),
                        turn("search", "bridge over the river"), turn("bbox", "[1, 2, 3]"),
                        turn("bbox", "[-1, 0, 10, 10]"), turn("bbox", "[300, 300, 100, 100]"),
                        turn("bbox", "[5, 5, 5, 5]"), turn("bbox", "not json"), turn("bbox", '{"a": 1, "b": 2, "c": 3, "d": 4}'),
                        turn("bbox", "[0, 0, 1000000000, 1000000000]"),
                        turn("bbox", "[10.5, 20.7, 200.2, 300.9]"), turn("bbox", "[Infinity, 0, 10, 10]"), ANSWER],
    # which block is the action: the first <search>/<answer>/<bbox> among the kept tags
    "tag_order": ["<think>maybe <search>ladybird beetle</search> first</think> then <bbox>[1, 1, 50, 50]</bbox>",
                  "<bbox>[20, 30, 220, 230]</bbox> and <search>bridge</search>",
                  "<search>  river lights  </search><answer>no</answer>", "<answer>ladybird</answer><search>x</search>"],
}
