"""Errors of the core. Each protocol-level error carries the HTTP status the adapters map it to.

Tool-level failures are never exceptions that leave the core: they become `ToolResult(ok=False)`.
"""

from __future__ import annotations


class ServiceError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class BadRequest(ServiceError):
    status = 422
    code = "invalid_request"


class ImageRejected(BadRequest):
    code = "invalid_image"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class SessionGone(ServiceError):
    status = 410
    code = "session_gone"


class TooLarge(ServiceError):
    status = 413
    code = "too_large"


class InsufficientStorage(ServiceError):
    """The shared output directory is at its bound: `path` delivery cannot write (nothing was recorded)."""

    status = 507
    code = "output_dir_full"


class Overloaded(ServiceError):
    status = 429
    code = "overloaded"

    def __init__(self, message: str, *, retry_after_s: int = 1, code: str | None = None):
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class Unavailable(ServiceError):
    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after_s: int = 1, code: str | None = None):
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"


class Forbidden(ServiceError):
    status = 403
    code = "forbidden"


class ToolFailure(Exception):
    """Raised inside a tool to end the call with `ok:false` and a model-readable text."""

    def __init__(self, text: str, code: str = "invalid_arguments"):
        super().__init__(text)
        self.text = text
        self.code = code
