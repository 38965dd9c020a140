"""VRAG-RL (Alibaba-NLP/VRAG @ 24f8d055, `VRAG-RL/vrag_agent/generation.py` and `search_engine/*.py`): the model
searches a corpus of document pages with `<search>query</search>`, is shown one page image a search, and may crop
the last retrieved page with `<bbox>[x1, y1, x2, y2]</bbox>`. Its rollout as it runs in training
(`LLMGenerationManager`, `is_validation=False`) reproduced: the turn (`toolserver/formats/vrag.py`), the checks and
the crop of `execute_predictions` and `_process_next_obs`, its `process_image` and its fixed texts.

`search` asks the retriever for the query's pages (ten, as its ColQwen engine answers: `min(pages, 10)`) and shows
the best one not retrieved before in this session, as stored (the file the engine names), through `process_image`
with the rollout's limits: scaled into [256·28·28, 512·28·28] pixels (`int()` sides, Pillow's default filter), then
made RGB. The retriever is this server's document library, every document at once
(`toolserver.documents.corpus`); a trainer that keeps VRAG's own loop points its `search_url` at this server's
`/vrag/search` instead (`toolserver/api/routers/vrag.py`, docs/vrag.md).

`bbox` reads the box as the rollout does: `json.loads`, four values, none negative; then scales it from the size of
the last image in the session (the last image the model was shown: after a crop that is the crop, not the page,
the reference's quirk) to the last page retrieved, `int()` each, clamps it to that page, crops the page as stored and
shows the crop through `process_image`. Whatever fails (a bad box, nothing retrieved yet, an empty or inverted crop)
answers the rollout's invalid-action text. The retrieved pages are the session's state, read from its call log.

Deviations (docs/decisions.md): the rollout's validation mode (±28 px around the box) is not reproduced; a search
whose pages were all shown already shows its best page again (the rollout reuses whatever image its batch loop
last held, or fails), and one that finds no page answers the invalid-action text (the rollout fails). The turn
limit is the caller's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.documents.corpus import search_corpus
from toolserver.documents.sources import DocumentError
from toolserver.formats.base import IMAGE_TOKEN
from toolserver.formats.vrag import INVALID_BBOX, VRAG
from toolserver.geometry import Coords
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.resample import resize_bicubic
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_PIXELS, MIN_PIXELS = 512 * 28 * 28, 256 * 28 * 28
TOP_K = 10  # the ColQwen search engine's answer: min(pages, 10)


def process_image(image: Image.Image, max_pixels: int = MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> Image.Image:
    """The rollout's `process_image`: into [min, max] pixels (`int()` sides, Pillow's default filter), then RGB."""
    if image.width * image.height > max_pixels:
        factor = math.sqrt(max_pixels / (image.width * image.height))
        image = _resize(image, (int(image.width * factor), int(image.height * factor)))
    if image.width * image.height < min_pixels:
        factor = math.sqrt(min_pixels / (image.width * image.height))
        image = _resize(image, (int(image.width * factor), int(image.height * factor)))
    return image if image.mode == "RGB" else image.convert("RGB")


def _resize(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    return resize_bicubic(image, size) if image.mode == "RGB" else image.resize(size)  # Pillow's default filter


def retrieved_pages(calls: tuple[str, ...]) -> list[str]:
    """The page files this session's searches retrieved, in order (the rollout's `retrievaled_images`)."""
    pages = []
    for line in calls:
        record = json.loads(line)
        meta = record.get("meta") or {}
        if record.get("tool") == "search" and record.get("ok") and meta.get("new"):
            pages.append(str(meta["page_file"]))
    return pages


def check_bbox(bbox: Any) -> None:
    """The rollout's check of a parsed box (`execute_predictions`), with Python's own comparisons."""
    if not (len(bbox) == 4 and bbox[0] >= 0 and bbox[1] >= 0 and bbox[2] >= 0 and bbox[3] >= 0):
        raise ValueError("Invalid bbox value")


def crop_box(bbox: Any, shown: tuple[int, int], page: tuple[int, int]) -> list[int]:
    """The rollout's scaling from the last image shown to the page, and its clamping (`_process_next_obs`)."""
    (width, height), (raw_width, raw_height) = shown, page
    area = [int(raw_width * bbox[0] / width), int(raw_height * bbox[1] / height), int(raw_width * bbox[2] / width),
            int(raw_height * bbox[3] / height)]
    return [max(0, area[0]), max(0, area[1]), min(raw_width, area[2]), min(raw_height, area[3])]


def _invalid(code: str, **meta: Any) -> ToolOutput:
    return ToolOutput.failure(INVALID_BBOX, code, **meta)


class SearchArgs(BaseModel):
    query: str = Field(description="What to search the document pages for.")


class BboxArgs(BaseModel):
    bbox: str = Field(description="The region of the last retrieved page to look at closer, as the JSON list "
                                  "[x1, y1, x2, y2] in pixels of the last image shown.")


class Search(Tool):
    name = "search"
    description = "Search the document pages; the best page not shown before is returned as an image."
    Args = SearchArgs
    raw_arguments = True
    lane = "heavy"

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        if ctx.documents is None:
            return ToolOutput.failure("Error: the document library is not available on this server.",
                                      "retriever_unavailable")
        query = args.get("query") if isinstance(args, dict) else None
        if not isinstance(query, str):
            return _invalid("invalid_arguments")
        try:
            hits = search_corpus(ctx.documents, query, TOP_K)
        except DocumentError as exc:
            return ToolOutput.failure(f"Error: {exc}", "no_ranking")
        if not hits:
            return _invalid("no_pages", query=query)
        seen = set(retrieved_pages(ctx.calls))
        hit = next((h for h in hits if str(h.path) not in seen), hits[0])
        with Image.open(hit.path) as page:
            shown = process_image(page)
        return ToolOutput(IMAGE_TOKEN, images=[shown], meta={
            "new": str(hit.path) not in seen, "page_file": str(hit.path), "document": hit.filename,
            "page": hit.page, "results": [[h.filename, h.page] for h in hits]})


class Bbox(Tool):
    name = "bbox"
    description = "Crop the last retrieved page: [x1, y1, x2, y2] in pixels of the last image shown."
    Args = BboxArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        text = args.get("bbox") if isinstance(args, dict) else None
        try:
            check_bbox(json.loads(text) if isinstance(text, str) else text)
        except Exception:  # the rollout's bare except: every failure reads as its invalid-action text
            return _invalid("invalid_arguments")
        pages = retrieved_pages(ctx.calls)
        if not pages or not ctx.images:
            return _invalid("nothing_retrieved")
        shown = ctx.images[-1]
        try:
            with Image.open(Path(pages[-1])) as page:
                area = crop_box(json.loads(text) if isinstance(text, str) else text, shown.size, page.size)
                crop = process_image(page.crop((area[0], area[1], area[2], area[3])))
        except Exception:
            return _invalid("invalid_crop")
        return ToolOutput(IMAGE_TOKEN, images=[crop], meta={"page_file": pages[-1], "crop_area": area,
                                                           "scaled_by": list(shown.size)})


PROFILES = (
    Profile("vrag-rl", "VRAG-RL: <search> returns one document page image from this server's library, <bbox> crops "
            "the last retrieved page scaled by the last image shown, both through its process_image; its "
            "invalid-action texts.",
            tools_by_name(Search(), Bbox()), coords=Coords.ABS_VIEW, call_format=VRAG, alpha=Alpha.DROP,
            reads_call_log=True),
)
