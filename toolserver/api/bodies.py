"""Request and response bodies the routers read and write by hand: JSON answered with pydantic's fast writer,
bodies parsed with bounded nesting, multipart uploads of images and videos, and errors in the service's shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import msgpack
import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.datastructures import UploadFile

from toolserver import jsonio
from toolserver.core import Core, RawImage
from toolserver.errors import BadRequest, ServiceError
from toolserver.models import ImageInput


def error_body(exc: ServiceError) -> dict[str, str]:
    return {"detail": exc.message, "code": exc.code}


def core_of(request: Request) -> Core:
    """The app's core (a dependency of every router)."""
    return request.app.state.core


def base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")


class BoundedJSONRequest(Request):
    """FastAPI parses declared bodies with `request.json()`: ours limits nesting (jsonio), so a body nested
    100,000 deep is a 422 like any malformed JSON instead of a RecursionError."""

    parse: Callable[[bytes], Any] = staticmethod(jsonio.loads)

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = self.parse(await self.body())
        return self._json


class OrjsonRequest(BoundedJSONRequest):
    """Bodies parsed by orjson: for verl-tool's protocol, whose every call carries the trajectory's images as data
    URLs (≈ 1.7 MB of JSON a call), twice as fast as `json.loads` here. orjson refuses nesting deeper than 1024
    with a JSONDecodeError, which FastAPI answers as a 422 like any malformed body."""

    parse = staticmethod(orjson.loads)


class BoundedJSONRoute(APIRoute):
    """A route whose declared body is read through `request_class`'s parser."""

    request_class: type[BoundedJSONRequest] = BoundedJSONRequest

    def get_route_handler(self):
        handler = super().get_route_handler()
        request_class = self.request_class

        async def parsed(request: Request) -> Response:
            return await handler(request_class(request.scope, request.receive))

        return parsed


class OrjsonRoute(BoundedJSONRoute):
    request_class = OrjsonRequest


MSGPACK = "application/msgpack"


def wants_msgpack(request: Request) -> bool:
    return MSGPACK in request.headers.get("accept", "")


def msgpack_response(model: BaseModel) -> Response:
    """The model as msgpack: the same fields as its JSON, with bytes (inline images) as bytes, not base64."""
    return Response(msgpack.packb(model.model_dump(mode="python")), media_type=MSGPACK)


def json_response(model: BaseModel, status_code: int = 200) -> Response:
    # pydantic's serializer is much faster than FastAPI's generic encoder on multi-megabyte base64 strings.
    return Response(jsonio.dump_model(model), status_code=status_code, media_type="application/json")


class _VideoSampling(BaseModel):
    """The multipart fields that say how video files among the uploads are sampled."""

    model_config = ConfigDict(extra="ignore")
    frames_per_second: Annotated[float | None, ImageInput.model_fields["frames_per_second"]] = None
    max_frames: Annotated[int | None, ImageInput.model_fields["max_frames"]] = None


async def form_images(request: Request) -> tuple[list[RawImage], dict[str, str]]:
    """multipart: image or video files under `files` (or `file`), other fields as strings; a video is sampled
    as the `frames_per_second` and `max_frames` fields say."""
    form = await request.form(max_files=10_000, max_fields=1_000, max_part_size=16 * 1024 * 1024)
    files, fields = [], {}
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            if name not in ("files", "file"):
                raise BadRequest(f"unexpected file field {name!r}; send images and videos as 'files'")
            files.append(await value.read())
        elif name in ("files", "file"):
            raise BadRequest(f"the multipart field {name!r} must be a file upload (with a filename)")
        else:
            fields[name] = value
    sampling = validate(_VideoSampling, {k: v for k, v in fields.items() if k in _VideoSampling.model_fields})
    return [RawImage(data, None, sampling.frames_per_second, sampling.max_frames) for data in files], fields


def is_multipart(request: Request) -> bool:
    return request.headers.get("content-type", "").startswith("multipart/form-data")


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        return {}
    return parse_json(raw, "request body")


def parse_json(raw: str | bytes, what: str) -> Any:
    try:
        return jsonio.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}", code="invalid_json") from None


def validate(model: type[BaseModel], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                            for e in exc.errors(include_url=False))
        raise BadRequest(f"invalid request: {details}") from None


def multipart_or_json(schema_ref: str) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that takes JSON or a multipart upload (read by hand)."""
    return {"requestBody": {"content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema_ref}"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {
            "files": {"type": "array", "items": {"type": "string", "format": "binary"},
                      "description": "Images, and videos (MP4/MOV, WebM, MKV) taken in as frames."},
            "settings": {"type": "string", "description": "Session settings as JSON (create only)."},
            "frames_per_second": {"type": "number", "exclusiveMinimum": 0, "maximum": 120,
                                  "description": "Videos: frames taken per second (default 2)."},
            "max_frames": {"type": "integer", "minimum": 1,
                           "description": "Videos: the most frames to take (default 32)."},
        }}},
    }, "required": False}}
