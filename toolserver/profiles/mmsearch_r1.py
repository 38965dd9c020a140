"""MMSearch-R1 (EvolvingLMMs-Lab/multimodal-search-r1 @ 583c6b49): the model asks for an image search of the
question's image with `<search><img></search>` and for a text search with `<text_search>query</text_search>`, and
reads the results back. Its multi-turn rollout (`vllm_rollout_spmd.py`) reproduced, the searches replayed from the
cache the user provides (`toolserver.searchcache`, FVQA's format; `SEARCH_CACHE`), offline and deterministic.

The reference's two tools (`mmsearch_r1/utils/tools/*.py`) are stubs the user fills in; their texts are the format
the rollout trains on: the image search's header, then per result `{n}. image: <thumbnail>\\ntitle: {title}\\n`
(thumbnails and titles interleaved, in the engine's order); the text search's header, then per result
`{n}. ({link}) {summary}\\n`; each tool's own error text when the search fails, here a key or query the cache does
not hold. The thumbnails go to the model as the cache stores them (the rollout adds the tool's images to the
trajectory unchanged; the model's processor resizes them as it resizes every image).

The rollout then wraps a result that is not an error (`Searched results: <information>` + result +
`</information>\\n` + `Original user's question: {question}\\n` + the after-search prompt it loads from
`mmsearch_r1/prompts/after_*_search_prompt_qwenvl.pkl`); an error goes bare. The question is cut from the
trajectory as the rollout cuts it: after `Here is the image and the question:\\n ` in the decoded context, up to the
next `assistant`, stripped; here the context is the session text `prompt` (the first user turn as the trainer
wrote it; without the marker, the whole text is taken). The image searched is named by the session text
`search_key`: the cache key of the row (FVQA's row id; the rollout passes the row's `image_urls` entry to its tool).

The limits are the training script's (`run_mmsearch_r1_grpo.sh`): one image search and two text searches a
trajectory, three rounds (`max_gen_round`); a search past them ends the episode without a result, as the rollout
drops the trajectory. Deviations (docs/decisions.md): a session without `prompt` or `search_key` gets a plain error
(the rollout would crash); a cached result whose image is null or missing is skipped with its title (DeepEyesV2's
reading of the same cache).
"""

from __future__ import annotations

import json
from typing import Any

from PIL import Image
from pydantic import BaseModel, Field

from toolserver.formats.base import IMAGE_TOKEN
from toolserver.formats.mmsearch_r1 import MMSEARCH_R1, SEARCH_LIMIT, decoded
from toolserver.profiles.base import Alpha, Profile, tools_by_name
from toolserver.searchcache import SearchCache, SearchCacheError
from toolserver.tools.base import Tool, ToolContext, ToolOutput

IMAGE_SEARCH_LIMIT, TEXT_SEARCH_LIMIT, MAX_GEN_ROUND = 1, 2, 3  # run_mmsearch_r1_grpo.sh
QUESTION_MARKER = "Here is the image and the question:\n "
IMAGE_HEADER = (
    "[Image Search Results] The result of the image search consists of web page information related to the image "
    "from the user's original question. Each result includes the main image from the web page and its title, ranked "
    "in descending order of search relevance, as demonstrated below:\n")
IMAGE_ERROR = ("[Image Search Results] There is an error encountered in performing search. Please reason with your "
               "own capaibilities.")
TEXT_HEADER = (
    "[Text Search Results] Below are the text summaries of the most relevant webpages related to your query, ranked "
    "in descending order of relevance:\n")
TEXT_ERROR = ("[Text Search Results] There is an error encountered in performing search. Please reason with your own "
              "capaibilities.")
# The rollout's after-search prompts (the pickles its training script names).
AFTER_IMAGE_SEARCH = (
    "Please extract the visual element relevant to the user's question (such as faces, objects, locations, events, "
    "logos, or text) from the search results. Then, combine this information with the user's question and perform "
    "reasoning to determine whether a Google text search is needed to retrieve additional information to answer the "
    "question.\nIf a text search is needed, output the string <text_search>your query here</text_search> at the end "
    "of your response. Please generate a well-crafted query based on the visual element that will help retrieve the "
    "most relevant information.\nIf a text search is not needed, use your own knowledge to directly answer the "
    "user's question.\nYou must conduct your reasoning inside <reason> and </reason> before taking any action, "
    "whether it's generating a text search query or providing a final answer. If you decide to give the final "
    "answer, place it inside <answer> and </answer>, without detailed explanation or illustration.\nFor example: "
    "<answer>Titanic</answer>")
AFTER_TEXT_SEARCH = (
    "Please analyze the search results and the user's question and continue reasoning inside <reason> and "
    "</reason>.\nIf you determine that additional knowledge is still required to answer the user's question, stop "
    "responding to the question and instead report a warning by outputting the string 'Unable to answer due to lack "
    "of relevant information' at the end of your response.\nIf no further external information is needed, you "
    "should provide the final answer by placing it within <answer> and </answer>. The answer must be concise, clear, "
    "and to the point, without any additional explanation or elaboration.")


def original_question(prompt: str) -> str:
    """The rollout's `org_query`: after its marker in the decoded context, up to the next `assistant`, stripped."""
    context = decoded(prompt)
    after = context.split(QUESTION_MARKER)[1] if QUESTION_MARKER in context else context
    return after.split("assistant")[0].strip()


def wrapped(result: str, question: str, after: str) -> str:
    """The rollout's message around a search result that is not an error."""
    return ("Searched results: <information>" + result + "</information>\n"
            + f"Original user's question: {question}\n" + after)


def searches_so_far(calls: tuple[str, ...]) -> tuple[int, int]:
    """(image searches, text searches) this session has run (the rollout's per-trajectory counters)."""
    counts = {"image_search": 0, "text_search": 0}
    for line in calls:
        record = json.loads(line)
        if record.get("tool") in counts and record.get("ok"):  # a search ran (a cache miss included)
            counts[record["tool"]] += 1
    return counts["image_search"], counts["text_search"]


def _refused(ctx: ToolContext, tool: str) -> ToolOutput | None:
    """The rollout's limits: the round (every earlier round searched once) and the search type's own count."""
    images, texts = searches_so_far(ctx.calls)
    own, limit = (images, IMAGE_SEARCH_LIMIT) if tool == "image_search" else (texts, TEXT_SEARCH_LIMIT)
    if own >= limit or images + texts >= MAX_GEN_ROUND - 1:
        return ToolOutput.failure(f"The rollout ends here: {tool} limit {limit} a trajectory or round "
                                  f"{MAX_GEN_ROUND} reached.", SEARCH_LIMIT, image_searches=images,
                                  text_searches=texts)
    return None


def session_cache(ctx: ToolContext) -> SearchCache | ToolOutput:
    """The search cache this session reads (the server's, or the file of its directory the session names), or the
    tool error that says why there is none."""
    if ctx.search_cache is None:
        return ToolOutput.failure("Error: no search cache is available to this call.", "search_cache_unavailable")
    try:
        return ctx.search_cache.get(ctx.texts.get("search_cache"))
    except SearchCacheError as exc:
        return ToolOutput.failure(f"Error: {exc}", "search_cache_invalid")


def _cache_and_question(ctx: ToolContext, name: str) -> tuple[SearchCache, str] | ToolOutput:
    refused = _refused(ctx, name)
    if refused is not None:
        return refused
    cache = session_cache(ctx)
    if isinstance(cache, ToolOutput):
        return cache
    prompt = ctx.texts.get("prompt")
    if prompt is None:
        return ToolOutput.failure("Error: the session has no text 'prompt' (the first user turn, which holds the "
                                  "question the rollout repeats after each search).", "no_prompt")
    return cache, original_question(prompt)


class NoArgs(BaseModel):
    pass


class TextSearchArgs(BaseModel):
    query: str = Field(description="What to search the web for.")


class ImageSearch(Tool):
    name = "image_search"
    description = "Search the web with the question's image: thumbnails and titles of the pages found, best first."
    Args = NoArgs

    def run(self, ctx: ToolContext, args: Any) -> ToolOutput:
        found = _cache_and_question(ctx, self.name)
        if isinstance(found, ToolOutput):
            return found
        cache, question = found
        key = ctx.texts.get("search_key")
        if key is None:
            return ToolOutput.failure("Error: the session has no text 'search_key' (the cache key of the row whose "
                                      "image is searched).", "no_search_key")
        results = cache.image_results(key)
        if results is None:
            return ToolOutput(IMAGE_ERROR, meta={"cached": False, "search_key": key})
        text, images = IMAGE_HEADER, []
        for i, (title, path) in enumerate(results):
            with Image.open(path) as stored:
                stored.load()
                images.append(stored.copy())
            text += f"{i + 1}. image: {IMAGE_TOKEN}\ntitle: {title}\n"
        return ToolOutput(wrapped(text, question, AFTER_IMAGE_SEARCH), images=images,
                          meta={"cached": True, "search_key": key, "titles": [t for t, _ in results]})


class TextSearch(Tool):
    name = "text_search"
    description = "Search the web with a text query: summaries of the most relevant pages, best first."
    Args = TextSearchArgs

    def run(self, ctx: ToolContext, args: TextSearchArgs) -> ToolOutput:
        found = _cache_and_question(ctx, self.name)
        if isinstance(found, ToolOutput):
            return found
        cache, question = found
        results = cache.text_results(args.query)
        if results is None:
            return ToolOutput(TEXT_ERROR, meta={"cached": False, "query": args.query})
        text = TEXT_HEADER + "".join(f"{i + 1}. ({r.link}) {r.snippet or ''}\n" for i, r in enumerate(results))
        return ToolOutput(wrapped(text, question, AFTER_TEXT_SEARCH), meta={"cached": True, "query": args.query})


PROFILES = (
    Profile("mmsearch-r1", "MMSearch-R1: <search><img></search> replays the cached image search of the session's row "
            "(thumbnails and titles interleaved), <text_search> the cached text search of a query; the rollout's "
            "messages, limits and error texts.",
            tools_by_name(ImageSearch(), TextSearch()), call_format=MMSEARCH_R1, alpha=Alpha.WHITE,
            reads_call_log=True),
)
