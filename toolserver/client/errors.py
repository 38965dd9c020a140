"""The client's errors: protocol failures as exceptions, which answers are retried, and how long to wait."""

from __future__ import annotations

import httpx
from tenacity import RetryCallState, wait_exponential_jitter


# -- errors --------------------------------------------------------------------------------------
class ToolServerError(Exception):
    """A protocol-level failure: the HTTP status, the server's error code and its message."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message if status is None else f"{status} {code}: {message}")
        self.message, self.status, self.code = message, status, code


class SessionNotFound(ToolServerError):
    """404 (never existed, or released) or 410 (expired or evicted): create a new session."""


class ToolServerOverloaded(ToolServerError):
    """429 after every retry: the server's queue stayed full."""


class ToolServerUnavailable(ToolServerError):
    """503 after every retry (shutting down, or a required component missing), or no connection at all."""


class ToolServerTimeout(ToolServerError):
    """No answer within the timeout (after every retry for a tool call, whose idempotency key makes a retry
    safe; other requests are not retried: they may have run on the server)."""


class _Retryable(Exception):
    def __init__(self, error: ToolServerError, retry_after: float | None):
        super().__init__(str(error))
        self.error, self.retry_after = error, retry_after


def _error_from(response: httpx.Response) -> ToolServerError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    detail = body.get("detail", response.text) if isinstance(body, dict) else response.text
    if isinstance(detail, list):  # FastAPI's own validation errors
        detail = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail)
    code = body.get("code") if isinstance(body, dict) else None
    status = response.status_code
    kind = {404: SessionNotFound, 410: SessionNotFound, 429: ToolServerOverloaded,
            503: ToolServerUnavailable}.get(status, ToolServerError)
    return kind(str(detail), status=status, code=code or "http_error")


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


class _Wait:
    """Exponential backoff with jitter, or the server's `Retry-After` when it gives one (capped)."""

    def __init__(self, backoff: float, max_backoff: float):
        self.exponential = wait_exponential_jitter(multiplier=backoff, max=max_backoff, jitter=backoff)
        self.max_backoff = max_backoff

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_backoff)
        return self.exponential(state)


# -- answers and transport failures as errors or retries, for both clients -----------------------
def _check(response: httpx.Response, keyed: bool = False) -> httpx.Response:
    # A proxy's 502/504 (an upstream down or slow) is retried only with an idempotency key: the call may have run.
    # So is a 500 that is not toolserver's own (a proxy's for a replica that died mid-request: Ray Serve answers
    # a lost replica with a plain-text 500); toolserver's own 500 is an `internal_error` body, not retried.
    proxy_error = response.status_code in (502, 504) or (response.status_code == 500 and not _ours(response))
    if response.status_code in (429, 503) or (keyed and proxy_error):
        raise _Retryable(_error_from(response), _retry_after(response))
    if response.is_error:
        raise _error_from(response)
    return response


def _ours(response: httpx.Response) -> bool:
    """Whether an error answer is toolserver's own (its JSON body with a `code`), not an intermediary's."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("code"), str)


def _keyed(request_kwargs: dict) -> bool:
    """Whether a request carries an idempotency key (then a retry cannot run its call twice)."""
    return "Idempotency-Key" in (request_kwargs.get("headers") or {})


def _transport_error(exc: httpx.TransportError, url: str, keyed: bool = False) -> ToolServerError | _Retryable:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        # The request never reached the server: safe to retry.
        return _Retryable(ToolServerUnavailable(f"cannot connect to {url}: {exc}"), None)
    if isinstance(exc, httpx.WriteError) or (isinstance(exc, httpx.RemoteProtocolError)
                                              and "without sending a response" in str(exc)):
        # A pooled connection the server had just closed (its keep-alive ran out as the request went out): the
        # request was not sent, or not read, so it is sent again on a fresh connection.
        return _Retryable(ToolServerUnavailable(f"the connection to {url} closed before an answer: {exc}"), None)
    if keyed and isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        # The server process went away mid-call (a node's worker killed and replaced, a replica restarted): the
        # call may have run, and its idempotency key makes the retry return what it recorded or run it once.
        return _Retryable(ToolServerUnavailable(f"the connection to {url} broke before an answer: {exc}"), None)
    if isinstance(exc, httpx.TimeoutException):
        error = ToolServerTimeout(f"no answer from {url} in time ({type(exc).__name__})")
        # With an idempotency key the retry gets the call's recorded result if it ran, so it is safe to send.
        return _Retryable(error, None) if keyed else error
    return ToolServerError(f"{type(exc).__name__} talking to {url}: {exc}")
