"""VRAG's search engine, in its own request and answer shapes, over this server's document library: a VRAG trainer
points its `search_url` here (docs/vrag.md).

- `GET /vrag/search?queries=q1&queries=q2` (Alibaba-NLP/VRAG @ 24f8d055, `search_engine/search_engine_api.py`): per
  query, its pages best first, `[{"idx": rank, "image_file": <the page image as stored>}, ...]`, ten at most as
  its ColQwen engine answers (`top_k` may ask for another number).
- `POST /vrag/search {"queries": [...], "top_k": 3, "search_corpus": null}`
  (`search_engine/search_engine_faiss_api.py`): `{"results": [{"score": [...], "indice": [...], "data":
  [{"type": "image", "file_path": ...}, ...]}, ...]}`;
  `search_corpus` names one document (an unknown one finds nothing, as an unknown corpus does there).

`image_file` / `file_path` are paths on this server's disk (the library's `pages/`): the trainer opens them, so it
must see the same files (a shared volume), as it sees its own engine's corpus.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from toolserver.api.bodies import BoundedJSONRoute, core_of, json_body, validate
from toolserver.errors import NotFound

router = APIRouter(route_class=BoundedJSONRoute, tags=["vrag"])
GET_TOP_K = 10  # the ColQwen engine: min(pages, 10)
MAX_QUERIES = 1000


class VragSearchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    queries: list[str] = Field(default_factory=list, max_length=MAX_QUERIES)
    top_k: int = Field(default=3, ge=1, le=1000)
    search_corpus: str | None = None


@router.get("/vrag/search", summary="VRAG's search engine (GET): each query's page images, best first",
            response_model=list[list[dict[str, Any]]])
async def vrag_search_get(request: Request, queries: list[str] = Query(..., max_length=MAX_QUERIES),
                          top_k: int = Query(GET_TOP_K, ge=1, le=1000)) -> Response:
    found = await core_of(request).search_pages(queries, top_k)
    return JSONResponse([[{"idx": rank, "image_file": str(hit.path)} for rank, hit in enumerate(hits)]
                          for hits in found])


@router.post("/vrag/search", summary="VRAG's FAISS search engine (POST): scores, indices and page files per query")
async def vrag_search_post(request: Request) -> Response:
    body = validate(VragSearchRequest, await json_body(request))
    try:
        found = await core_of(request).search_pages(body.queries, body.top_k, body.search_corpus)
    except NotFound:  # an unknown corpus: the engine answers an empty list
        return JSONResponse({"results": []})
    return JSONResponse({"results": [
        {"score": [hit.score for hit in hits], "indice": [rank for rank, _ in enumerate(hits)],
         "data": [{"type": "image", "file_path": str(hit.path)} for hit in hits]} for hits in found]})
