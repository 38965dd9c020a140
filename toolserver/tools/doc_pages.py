"""ARM-Thinker's document tools, `doc_page_retrieval_by_query` and `doc_page_retrieval_by_index`.

Validation order, texts and page presentation are ARM-Thinker's (InternLM/ARM-Thinker @ 96b1baf,
`verl/tools/doc_page_tools.py`): top 5 pages,
de-duplicated in rank order, each shrunk to a long side of 1120, stitched left to right on white with
8-px gaps, the whole capped at 80 MP; page indices are 1-based. The ranking behind `by_query` is this
server's fusion of what is installed (`toolserver.documents.library`), not CLIP alone.

Choices where the reference is silent or would fail (docs/decisions.md, "Document tools"):
- an unknown document gets ARM-Thinker's "No relevant content found" text, but as `ok:false`
  (`unknown_document`), because the call was wrong;
- a whitespace-only query counts as missing, like an empty one;
- `image_idx` accepts what Python's `int()` accepts exactly (ints, integral floats, digit strings);
- `arm_literal` (the `arm-thinker` profile) keeps the reference's quirks: the by-index "not found" text
  with its unformatted `{}` and the server paths tried; the `default` profile fills them in instead.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from toolserver.documents.sources import DocumentError
from toolserver.documents.stitch import MAX_PIXELS, MAX_SIDE, shrink_to_long_side, stitch
from toolserver.errors import ToolFailure
from toolserver.tools.base import Tool, ToolContext, ToolOutput

RETRIEVE_K = 5
PAGE_GAP = 8
FILENAME_DESCRIPTION = "Document identifier used for retrieval."


class DocSearchArgs(BaseModel):
    filename: str = Field(description=FILENAME_DESCRIPTION)
    query: str = Field(description="Natural-language search query to find relevant pages.")


class DocIndexArgs(BaseModel):
    filename: str = Field(description=FILENAME_DESCRIPTION)
    image_idx: int = Field(description="1-based page index to fetch (e.g., 1 = first page image).")


def _library(ctx: ToolContext) -> Any:
    if ctx.documents is None:
        raise ToolFailure("Error: RetrieverManager failed to initialize.", "retriever_unavailable")
    return ctx.documents


def _require(args: dict[str, Any], name: str) -> Any:
    value = args.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ToolFailure(f"Error: missing required parameter '{name}'.", "missing_argument")
    return value


class DocPageSearch(Tool):
    name = "doc_page_retrieval_by_query"
    lane = "heavy"
    Args = DocSearchArgs
    raw_arguments = True

    def __init__(self, *, arm_literal: bool = False, k: int = RETRIEVE_K, max_side: int = MAX_SIDE,
                 max_pixels: int = MAX_PIXELS):
        self.arm_literal = arm_literal
        self.k, self.max_side, self.max_pixels = k, max_side, max_pixels
        self.description = (
            "Search pages in a document by natural-language query and return one image that concatenates the "
            "top-k matched pages. Note that this tool may be inaccurate, so you should use it as a reference only."
            + ("" if arm_literal else " {doc_rankings}"))

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        library = _library(ctx)
        filename = str(_require(args, "filename"))
        query = str(_require(args, "query"))
        not_found = (f"No relevant content found for '{query}' in document '{filename}'. Maybe you should check "
                     "your provided filename in your tool calling.")
        try:
            result = library.search(filename, query, self.k)
        except DocumentError as exc:
            if exc.code == "unknown_document":
                raise ToolFailure(not_found, "unknown_document") from None
            raise ToolFailure(f"Retrieval error: {exc.message}", exc.code) from None
        except Exception as exc:  # the store or a model failed: the model reads what happened
            raise ToolFailure(f"Retrieval error: {exc}", "retrieval_error") from None
        pages = result.pages
        if not pages:
            return ToolOutput(text=not_found, meta={"filename": filename, "pages": []})
        paths = []
        for page in pages:
            candidates = library.page_candidates(filename, page)
            found = next((p for p in candidates if p.is_file()), None)
            if found is None:
                tried = f" Tried: {' | '.join(str(c) for c in candidates)}" if self.arm_literal else ""
                raise ToolFailure(f"Error: Image not found for page {page} in {filename}.{tried}", "page_missing")
            paths.append(found)
        # The stitch depends only on the pages' files and the rule: sessions asking the same pages share it (and
        # wait for one another rather than search again).
        rule = ("stitch", self.max_side, PAGE_GAP, self.max_pixels)
        image = ctx.derived((rule, *map(_page_identity, paths)), lambda: stitch(
            [_open_page(path) for path in paths], target=self.max_side, gap=PAGE_GAP, max_pixels=self.max_pixels),
            rerun=False)
        text = (f"Concatenated page images for query '{query}' in '{filename}': pages {pages}. If the retrieved "
                "pages don't seem relevant, you can try using a different or more specific query string to "
                "improve the results.")
        return ToolOutput(text=text, images=[image], meta={
            "filename": filename, "pages": pages, "rankings": {k: v[:self.k] for k, v in result.rankings.items()}})


class DocPageByIndex(Tool):
    name = "doc_page_retrieval_by_index"
    description = "Return a single page image by 1-based page index for a given document."
    Args = DocIndexArgs
    raw_arguments = True

    def __init__(self, *, arm_literal: bool = False, max_side: int = MAX_SIDE):
        self.arm_literal = arm_literal
        self.max_side = max_side

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
        library = _library(ctx)
        filename = str(_require(args, "filename"))
        if args.get("image_idx") is None:
            raise ToolFailure("Error: missing required parameter 'image_idx'.", "missing_argument")
        index = _as_int(args["image_idx"])
        if index is None:
            raise ToolFailure("Error: 'image_idx' must be an integer (1-based).", "invalid_arguments")
        if index < 1:
            raise ToolFailure("Error: 'image_idx' must be >= 1 (1-based index).", "invalid_arguments")
        found = next((p for p in library.page_candidates(filename, index) if p.is_file()), None)
        if found is None:
            raise ToolFailure(self._not_found(library, filename, index), "page_not_found")
        image = ctx.derived((("page", self.max_side), _page_identity(found)),
                            lambda: shrink_to_long_side(_open_page(found), self.max_side))
        return ToolOutput(text=f"Here is page image #{index} for document '{filename}'.", images=[image],
                          meta={"filename": filename, "page": index})

    def _not_found(self, library: Any, filename: str, index: int) -> str:
        tail = ("Maybe you input the wrong filename or image index out of range. Please check your input and "
                "try again.")
        if self.arm_literal:  # the reference never formats this string
            return f"Error: Image not found for page {{}} in {{}}. {tail}"
        pages = library.page_count(filename)
        known = f" Document '{filename}' has {pages} pages." if pages else ""
        return f"Error: Image not found for page {index} in {filename}. {tail}{known}"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value)
    return None


def _page_identity(path: Any) -> tuple[str, int, int]:
    """A page file as a stitch depends on it: its path, modification time and size (a replaced page is another
    page)."""
    try:
        stat = path.stat()
    except OSError as exc:  # removed since it was found
        raise ToolFailure(f"Error: the page image {path.name} cannot be read: {exc}", "page_unreadable") from None
    return str(path), stat.st_mtime_ns, stat.st_size


def _open_page(path: Any):
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except (OSError, ValueError) as exc:
        raise ToolFailure(f"Error: the page image {path.name} cannot be read: {exc}", "page_unreadable") from None
