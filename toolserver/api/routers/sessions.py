"""Sessions and their memory map: create, read, release; add images, videos and texts; read an image back."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from toolserver.api.bodies import (
    BoundedJSONRoute,
    core_of,
    form_images,
    is_multipart,
    json_body,
    json_response,
    multipart_or_json,
    parse_json,
    validate,
)
from toolserver.models import (
    AddedImages,
    AddedTexts,
    AddImagesRequest,
    AddTextsRequest,
    CreateSessionRequest,
    SessionCreated,
    SessionInfo,
)

router = APIRouter(route_class=BoundedJSONRoute, tags=["sessions"])


@router.post("/v1/sessions", status_code=201, response_model=SessionCreated,
             openapi_extra=multipart_or_json("CreateSessionRequest"),
             summary="Create a session with settings and, optionally, images and texts")
async def create_session(request: Request) -> Response:
    if is_multipart(request):
        raw, fields = await form_images(request)
        body = validate(CreateSessionRequest, parse_json(fields.get("settings") or "{}", "settings"))
    else:
        raw, body = [], validate(CreateSessionRequest, await json_body(request))
    return json_response(await core_of(request).create_session(body, raw), 201)


@router.get("/v1/sessions/{session_id}", response_model=SessionInfo,
            summary="The session's memory map and settings")
async def get_session(session_id: str, request: Request) -> Response:
    return json_response(await core_of(request).session_info(session_id))


@router.delete("/v1/sessions/{session_id}", status_code=204, summary="Release everything the session holds")
async def delete_session(session_id: str, request: Request) -> Response:
    await core_of(request).release(session_id)
    return Response(status_code=204)


@router.post("/v1/sessions/{session_id}/images", response_model=AddedImages,
             openapi_extra=multipart_or_json("AddImagesRequest"),
             summary="Add images or a video's frames: multipart upload, base64 / data URI, allowed server path or URL")
async def add_images(session_id: str, request: Request) -> Response:
    core = core_of(request)
    if is_multipart(request):
        raw, _ = await form_images(request)
        added = await core.add_images(session_id, raw_images=raw)
    else:
        body = validate(AddImagesRequest, await json_body(request))
        added = await core.add_images(session_id, body.images)
    return json_response(added)


@router.get("/v1/sessions/{session_id}/images/{key}",
            responses={200: {"content": {"image/png": {}, "image/jpeg": {}, "image/webp": {}}}},
            summary="An image's bytes (inputs as uploaded; tool images in the session's format)")
async def get_image(session_id: str, key: str, request: Request,
                    format: Annotated[str | None, Query(pattern="^(png|jpeg|webp)$")] = None,
                    max_side: Annotated[int | None, Query(ge=1, le=4096, description=(
                        "A JPEG thumbnail no larger than this on its long side (1-4096)"))] = None) -> Response:
    core = core_of(request)
    if max_side is not None:
        return Response(await core.thumbnail(session_id, key, max_side), media_type="image/jpeg")
    data, mime = await core.image_bytes(session_id, key, format)
    return Response(data, media_type=mime)


@router.post("/v1/sessions/{session_id}/texts", response_model=AddedTexts,
             summary="Add texts (a dict names them; a list gets text_0, text_1, …)")
async def add_texts(session_id: str, body: AddTextsRequest, request: Request) -> Response:
    return json_response(AddedTexts(texts=await core_of(request).add_texts(session_id, body.texts)))
