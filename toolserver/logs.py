"""Logging: one JSON object per line (or plain text for a terminal), each with the request id.

The request id comes from the caller's `X-Request-ID` when it is a sane token, else a new one; it is
echoed in the response and set in a context variable that a filter copies onto every record, so a
warning logged deep in a tool thread's caller carries the id of the request that caused it.
Headers are never logged (the API key travels in one).
"""

from __future__ import annotations

import logging
import logging.config
import re
import uuid
from contextvars import ContextVar
from typing import Any

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
_SANE_ID = re.compile(r"^[\w.:-]{1,128}$")


def new_request_id(offered: str | None) -> str:
    return offered if offered and _SANE_ID.match(offered) else uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id.get()
        record.__dict__.pop("color_message", None)  # uvicorn's terminal-coloured copy of the message
        return True


# A record's own attributes; anything else on it came as `extra=` (a field of the JSON line).
_RECORD_FIELDS = {*logging.LogRecord("", 0, "", 0, "", None, None).__dict__, "message", "asctime", "request_id",
                  "taskName", "color_message"}
ACCESS_FIELDS = ("method", "path", "status", "duration_ms")


class TextFormatter(logging.Formatter):
    """Plain text for a terminal, with what the JSON lines carry as fields: an access record reads
    `GET /v1/tools 200 1.23 ms client=127.0.0.1`; any other record's extra fields follow its message as `key=value`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        # `_`-prefixed attributes are a library's own (Ray's record factory adds `_ray_timestamp_ns`), not `extra=`.
        extras = {k: v for k, v in record.__dict__.items() if k not in _RECORD_FIELDS and not k.startswith("_")}
        if all(field in extras for field in ACCESS_FIELDS):
            record = logging.makeLogRecord({**record.__dict__, "message": (
                f"{extras.pop('method')} {extras.pop('path')} {extras.pop('status')} {extras.pop('duration_ms')} ms")})
        text = super().formatMessage(record)
        return " ".join([text, *(f"{key}={value}" for key, value in extras.items())])


def logging_config(fmt: str = "json", level: str = "info") -> dict[str, Any]:
    """A `logging.config.dictConfig` for the server, uvicorn's own loggers included."""
    formatters = {
        "json": {"()": "pythonjsonlogger.json.JsonFormatter",
                 "fmt": "%(levelname)s %(name)s %(message)s %(request_id)s",
                 "rename_fields": {"levelname": "level", "name": "logger"},
                 "timestamp": "time"},  # ISO 8601, UTC
        "text": {"()": TextFormatter},
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {fmt: formatters[fmt]},
        # The handler filters too: some libraries set their own loggers to DEBUG.
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "level": level.upper(),
                                "formatter": fmt, "filters": ["request_id"]}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            # uvicorn's records go to the root handler; its access log is replaced by ours (with the id).
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False},
            # Chatty libraries stay at warnings.
            "httpx": {"level": "WARNING"},
            "chromadb": {"level": "WARNING"},
        },
    }


def configure_logging(fmt: str = "json", level: str = "info") -> None:
    logging.config.dictConfig(logging_config(fmt, level))
