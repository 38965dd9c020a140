"""The document library: ingest (a PDF upload or a server path), list, read one, delete."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request, Response
from starlette.datastructures import UploadFile

from toolserver.api.bodies import BoundedJSONRoute, core_of, is_multipart, json_body, json_response, validate
from toolserver.errors import BadRequest
from toolserver.models import FILENAME_PATTERN, DocumentInfo, IngestPathRequest

router = APIRouter(route_class=BoundedJSONRoute, tags=["documents"])

_INGEST_BODY = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "The PDF."},
        "filename": {"type": "string", "pattern": FILENAME_PATTERN,
                     "description": "Document id (default: the file's stem)."},
    }}},
    "application/json": {"schema": {"$ref": "#/components/schemas/IngestPathRequest"}}}}}


@router.post("/v1/documents", status_code=202, response_model=DocumentInfo,
             summary="Ingest a document: a PDF upload, or a server path (PDF or page-image folder)",
             responses={200: {"model": DocumentInfo, "description": "Ingested (with `wait=true`)"},
                        409: {"description": "The document is being ingested already"}},
             openapi_extra=_INGEST_BODY)
async def ingest_document(request: Request, wait: bool = False) -> Response:
    """The document is checked at once (a corrupt or encrypted PDF is a 422 and changes nothing), then
    rendered and embedded in the background, one document at a time: poll `GET /v1/documents/{filename}`
    for `pages_done`, or pass `wait=true` to answer when it is done. Ingesting an unchanged document
    again does nothing (`unchanged: true`); a changed one is replaced; a `partial` one is resumed."""
    core = core_of(request)
    if is_multipart(request):
        form = await request.form(max_files=1, max_fields=10)
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise BadRequest("send the PDF as the multipart file field 'file'")
        filename = form.get("filename")
        info = await core.ingest_document(data=await upload.read(), upload_name=upload.filename or "document.pdf",
                                          filename=filename if isinstance(filename, str) and filename else None,
                                          wait=wait)
    else:
        body = validate(IngestPathRequest, await json_body(request))
        info = await core.ingest_document(path=body.path, filename=body.filename, wait=wait)
    return json_response(info, 200 if wait else 202)


@router.get("/v1/documents", response_model=list[DocumentInfo], summary="The documents in the library")
async def list_documents(request: Request) -> Response:
    docs = core_of(request).list_documents()
    return Response(json.dumps([d.model_dump(mode="json") for d in docs]), media_type="application/json")


@router.get("/v1/documents/{filename}", response_model=DocumentInfo,
            summary="One document and where its ingestion stands")
async def get_document(filename: str, request: Request) -> Response:
    return json_response(await core_of(request).document(filename))


@router.delete("/v1/documents/{filename}", status_code=204,
               summary="Delete a document: its pages, texts and embeddings")
async def delete_document(filename: str, request: Request) -> Response:
    await core_of(request).delete_document(filename)
    return Response(status_code=204)
