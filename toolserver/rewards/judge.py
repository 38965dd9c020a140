"""The LLM judge client: an OpenAI-compatible `/chat/completions` endpoint the operator configures.

There is no default judge: `judge_from_settings` returns None unless `judge_url` and `judge_model` are set, and a
judged reward given none answers `judge_not_configured`. The messages and sampling parameters are the reward's
(the reference's own); this client adds only the model name, the key, a timeout, retries with backoff, and a bound on
the requests in flight.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from toolserver.config import Settings
from toolserver.errors import ServiceError

RETRIED_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class JudgeFailed(ServiceError):
    status = 502
    code = "judge_failed"


class OpenAIJudge:
    """Chat completions against `url` (`…/v1`), the first choice's message content returned as is."""

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0,
                 retries: int = 2, concurrency: int = 16, backoff_s: float = 0.5):
        if not url or not model:
            raise ValueError("a judge needs a URL and a model")
        self.url = url.rstrip("/") + "/chat/completions"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.retries = retries
        self.concurrency = concurrency
        self.backoff_s = backoff_s
        self._client: httpx.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None
        self.requests = 0  # requests sent, retries included

    @property
    def model(self) -> str:
        return self._model

    def _ready(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        if self._client is None or self._slots is None:
            limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
            self._client = httpx.AsyncClient(timeout=self.timeout_s, limits=limits, headers=self._headers)
            self._slots = asyncio.Semaphore(self.concurrency)
        return self._client, self._slots

    async def chat(self, messages: list[dict[str, Any]], **params: Any) -> str:
        client, slots = self._ready()
        body = {"model": self._model, "messages": messages, **params}
        problem = ""
        async with slots:
            for attempt in range(self.retries + 1):
                if attempt:
                    await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
                self.requests += 1
                try:
                    response = await client.post(self.url, json=body)
                except httpx.HTTPError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    continue
                if response.status_code in RETRIED_STATUS:
                    problem = f"HTTP {response.status_code}: {response.text[:200]}"
                    continue
                return _content(response)
        raise JudgeFailed(f"the judge at {self.url} did not answer after {self.retries + 1} tries ({problem})")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
            self._slots = None


def _content(response: httpx.Response) -> str:
    if response.status_code != 200:
        raise JudgeFailed(f"the judge answered HTTP {response.status_code}: {response.text[:300]}")
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise JudgeFailed(f"the judge's answer is not a chat completion: {response.text[:300]}") from None
    return content if isinstance(content, str) else ""


def judge_from_settings(settings: Settings) -> OpenAIJudge | None:
    """The configured judge, or None: never a default endpoint."""
    if not settings.judge_url and not settings.judge_model:
        return None
    if not settings.judge_url or not settings.judge_model:
        raise ValueError("the judge needs both TOOLSERVER_JUDGE_URL and TOOLSERVER_JUDGE_MODEL")
    return OpenAIJudge(settings.judge_url, settings.judge_model, api_key=settings.judge_api_key,
                       timeout_s=settings.judge_timeout_s, retries=settings.judge_retries,
                       concurrency=settings.judge_concurrency)
