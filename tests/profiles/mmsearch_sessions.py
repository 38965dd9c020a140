"""The cache and the sessions of the MMSearch-R1 golden cases, shared by the recorder
(scripts/goldens/record_mmsearch_r1.py) and the test (tests/profiles/test_mmsearch_r1.py).

`make_cache(directory, photos)` writes a small FVQA-format cache from the real photographs in ../shared/data/photos
(their licences are in that folder's LICENSES.md): thumbnails saved as the cache stores them (JPEG, a palette PNG, a
greyscale JPEG), the paths relative to the cache file as FVQA ships them, an entry with a null path and one with a
missing file, and text-search entries.
"""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

QUESTION = "Which insect is shown on this leaf, and where does it usually live?"
PROMPT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nAnswer the user's question "
          "based on the provided image.\nHere is the image and the question:\n<|vision_start|><|image_pad|>"
          f"<|vision_end|> {QUESTION}<|im_end|>\n<|im_start|>assistant\n")
END = "<|im_end|>"

THUMBNAILS = {  # file in the cache -> (photograph, thumbnail box, mode)
    "thumbs/ladybird.jpg": ("LadyBird.jpg", (200, 200), "RGB"),
    "thumbs/dragonfly.jpg": ("Dragonfly_by_Bolly.jpg", (256, 160), "RGB"),
    "thumbs/wings.png": ("TwoWings.jpg", (120, 180), "P"),
    "thumbs/wood_grey.jpg": ("Wood.jpg", (150, 150), "L"),
    "thumbs/altai.jpg": ("Altai_1080x1920.png", (90, 160), "RGB"),
}

IMAGE_ENTRIES = {
    "fvqa_train_0001": {"tool_returned_web_title": ["Coccinellidae - Wikipedia", "Ladybird beetle on a leaf | Stock",
                                                    "Dragonflies and damselflies", "Insects of the garden — guide"],
                        "cached_images_path": ["thumbs/ladybird.jpg", "thumbs/dragonfly.jpg", "thumbs/wings.png",
                                               "thumbs/wood_grey.jpg"]},
    "fvqa_train_0002": {"tool_returned_web_title": ["A lost page", "Altai mountains", "Gone", "Wood texture"],
                        "cached_images_path": [None, "thumbs/altai.jpg", "thumbs/not_there.jpg",
                                               "thumbs/wood_grey.jpg"]},
    "fvqa_train_0003": {"tool_returned_web_title": [], "cached_images_path": []},
}

TEXT_ENTRIES = {
    "ladybird habitat": [
        {"title": "Ladybird - habitat", "link": "https://example.org/ladybird",
         "snippet": "Ladybirds live in meadows, gardens and woodland edges, where aphids are plentiful."},
        {"title": "Coccinellidae", "link": "https://example.org/coccinellidae",
         "snippet": "A family of small beetles; most species prey on aphids.", "date": "2024-05-01"}],
    "seven-spot ladybird range": [
        {"title": "Coccinella septempunctata", "link": "https://example.org/c7",
         "snippet": "Native to Europe, Asia and North Africa; introduced to North America."}],
}


def make_cache(directory: Path, photos: Path) -> Path:
    """The cache file (and its thumbnails) under `directory`; returns the file."""
    for name, (photo, box, mode) in THUMBNAILS.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(photos / photo) as image:
            thumb = image.convert("RGB")
            thumb.thumbnail(box)
            if mode == "P":
                thumb.quantize(64).save(target)
            else:
                thumb.convert(mode).save(target, quality=85)
    path = directory / "fvqa_cache.json"
    path.write_text(json.dumps({**IMAGE_ENTRIES, **TEXT_ENTRIES}, indent=1, ensure_ascii=False), encoding="utf-8")
    return path


# Each session: its search key and its responses, one per round, as the model wrote them (ending in <|im_end|>).
SESSIONS = [
    {"name": "image_then_text_then_answer", "search_key": "fvqa_train_0001", "responses": [
        "<reason>I cannot tell the species for sure.</reason><search><img></search>" + END,
        "<reason>The results show a ladybird.</reason><text_search>ladybird habitat</text_search>" + END,
        "<reason>Meadows and gardens.</reason><answer>A ladybird; meadows and gardens</answer>" + END]},
    {"name": "skipped_results_and_text_misses", "search_key": "fvqa_train_0002", "responses": [
        "<reason>Unsure.</reason>\n<search><img></search>\n" + END,
        "<reason>Look it up.</reason><text_search>altai insects</text_search>" + END,
        "<reason>Nothing found.</reason><answer>unknown</answer>" + END]},
    {"name": "image_search_miss", "search_key": "fvqa_val_9999", "responses": [
        "<search><img></search>" + END,
        "<reason>First ask.</reason><text_search>wrong</text_search> then <text_search> ladybird habitat"
        "</text_search>" + END,
        "<answer>ladybird</answer>" + END]},
    {"name": "empty_image_entry", "search_key": "fvqa_train_0003", "responses": [
        "<reason>?</reason><search><img></search>" + END, "<answer>no idea</answer>" + END]},
    {"name": "text_search_limits", "search_key": "fvqa_train_0001", "responses": [
        "<text_search>ladybird habitat</text_search>" + END,
        "<text_search>seven-spot ladybird range</text_search>" + END,
        "<text_search>ladybird habitat</text_search>" + END]},
    {"name": "second_image_search_refused", "search_key": "fvqa_train_0001", "responses": [
        "<search><img></search>" + END, "<reason>again</reason><search><img></search>" + END]},
    {"name": "not_at_the_end", "search_key": "fvqa_train_0001", "responses": [
        "<search><img></search> is what I would call, but I answer: <answer>ladybird</answer>" + END]},
    {"name": "empty_text_query", "search_key": "fvqa_train_0001", "responses": [
        "<reason>x</reason><text_search></text_search>" + END]},
    {"name": "multiline_text_search", "search_key": "fvqa_train_0001", "responses": [
        "<text_search>ladybird\nhabitat</text_search>" + END]},
]
