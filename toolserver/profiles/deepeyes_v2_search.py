"""DeepEyesV2's searches (Visual-Agent/DeepEyesV2 @ 0373e6e0, `DeepEyesV2_ENV.execute`'s tool-call branch and
`request_search`, `envs/deepeyesv2/search_utils.py`), replayed from the user's cache (`toolserver.searchcache`).

A `<tool_call>` whose JSON reads is handed here whole (`search`, argument `action`: the call as written) and
answered as the env answers it: its checks of the name and arguments and their error texts; `image_search` (no
arguments) looks the row up in FVQA's image-search cache by the session text `search_key` (the env's
`extra_info['index']`: only an index holding `fvqa` is searched), keeps the results whose image exists, and shows
every image as it opens it (at most 10 a turn, while the text lists them all, as the env does); `search` (argument
`query`) reads the query's cached results (the env's placeholder `search()` stands for the engine) and renders
them in the env's markdown. A search the cache cannot answer is the env's `Search error`, which ends the episode;
an exception in the env's branch is its `Error: {exception} for {index}` text. The question is the env's
`<tool_response>` template in Qwen's markup (`DeepEyesV2Format.prompt`).
"""

from __future__ import annotations

import json
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.profiles.mmsearch_r1 import session_cache
from toolserver.searchcache import SearchCache
from toolserver.tools.base import Tool, ToolContext, ToolOutput

MAX_IMAGES = 10  # the env's `max_images_per_round`
SEARCH_ERROR = "search_error"  # the env's "Search error": the episode ends
RETURN_SEARCH_PROMPT = "<tool_response>\n{search_result}\n</tool_response>\n"
VIDEO_NOTE = "Your browser can't play this video."


class EnvError(Exception):
    """What the env's `except Exception as e` branch answers (`Error: {e} for {index}`)."""


def _refusal(action: str, call: Any) -> str | None:
    """The env's checks of a parsed call, in its order (a missing name raises, as there)."""
    name = call["name"]
    arguments = call.get("arguments", None)
    if name not in ("search", "image_search"):
        return f"Error: Invalid tool call name: {action}."
    if name == "image_search" and arguments is not None:
        return f"Error: Invalid tool call parameters for image search: {action}."
    return None


def image_search(cache: SearchCache, index: str | None) -> tuple[str, list[Image.Image]] | None:
    """`search_utils.image_search` and `request_search`'s rendering; None for the env's 'Error'."""
    if index is None or "fvqa" not in index:
        if index is None:
            raise EnvError("argument of type 'NoneType' is not iterable")
        return None
    results = cache.image_results(index)
    if results is None:
        return None
    images, snippets = [], []
    try:
        for i, (title, path) in enumerate(results):
            with Image.open(path) as image:
                image.load()
                images.append(image.copy())
            snippets.append(f"{i + 1}. <image>\n[{title}] \n".replace(VIDEO_NOTE, ""))
    except Exception:  # the env's status 'error': 'Search error'
        return None
    content = (f"A Google image search for the image found {len(snippets)} results:\n\n## Web Results\n"
               + "\n\n".join(snippets))
    return content, images


def text_search(cache: SearchCache, query: Any) -> str | None:
    """`request_search`'s text branch over the cached results; None for the env's 'Error'."""
    results = cache.text_results(query) if isinstance(query, str) else None
    if results is None:
        return None
    snippets = []
    for i, page in enumerate(results):
        date = "\nDate published: " + page.date if page.date is not None else ""
        snippet = "\n" + page.snippet if page.snippet is not None else ""
        snippets.append(f"{i + 1}. [{page.title}]({page.link}){date}\n{snippet}".replace(VIDEO_NOTE, ""))
    return f"A Google search for '{query}' found {len(snippets)} results:\n\n## Web Results\n" + "\n\n".join(snippets)


class SearchCallArgs(BaseModel):
    action: str = Field(description='The tool call\'s JSON as written: {"name": "image_search"} or {"name": '
                                    '"search", "arguments": {"query": "..."}}.')


class DeepEyesV2Search(Tool):
    name = "search"
    description = ("DeepEyesV2's tool call, replayed from the search cache: {\"name\": \"image_search\"} searches "
                   "the session's image, {\"name\": \"search\", \"arguments\": {\"query\": …}} the web.")
    Args = SearchCallArgs
    raw_arguments = True

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        action = args.get("action") if isinstance(args, dict) else None
        if not isinstance(action, str):
            return ToolOutput.failure("Error: `action` must be the tool call's JSON as written.", "invalid_arguments")
        index = ctx.texts.get("search_key")
        try:
            call = json.loads(action)
            refused = _refusal(action, call)
        except Exception as exc:
            return ToolOutput.failure(f"Error: {exc} for {index}", "search_exception")
        if refused is not None:
            return ToolOutput.failure(refused, "invalid_tool_call")
        cache = session_cache(ctx)
        if isinstance(cache, ToolOutput):
            return cache
        images: list[Image.Image] = []
        try:
            if call["name"] == "image_search":
                found = image_search(cache, index)
                content, images = found if found is not None else (None, [])
            else:
                content = text_search(cache, call.get("arguments", None)["query"])
        except Exception as exc:
            return ToolOutput.failure(f"Error: {exc} for {index}", "search_exception")
        if content is None:
            return ToolOutput.failure("Search error", SEARCH_ERROR, search_key=index)
        body = RETURN_SEARCH_PROMPT.format(search_result=content).strip()
        return ToolOutput(body, images=images[:MAX_IMAGES], meta={"search_key": index})
