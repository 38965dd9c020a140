"""A local OpenAI-compatible endpoint for recording judged rewards: it answers each POST (any path: Azure's
`/openai/deployments/<model>/chat/completions?…` or `/v1/chat/completions`) with the next scripted verdict and keeps
the request's JSON body, so a golden holds exactly what the reference sent and what it was told."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Recorder:
    def __init__(self) -> None:
        self.answers: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # `/models`, for references that ask which model is served
                self._send({"object": "list", "data": [{"id": "judge-model", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                recorder.requests.append(body)
                recorder.paths.append(self.path)
                answer = recorder.answers.pop(0)
                self._send({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", ""),
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": answer}}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

            def _send(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, answers: list[str]) -> None:
        """Script the next verdicts and forget the requests recorded so far."""
        self.answers, self.requests, self.paths = list(answers), [], []

    def exchanges(self, answers: list[str]) -> list[dict[str, Any]]:
        """The requests sent since `take`, each with the verdict it got, in the golden format."""
        return [{"messages": body["messages"], "params": {k: v for k, v in body.items() if k not in
                                                           ("model", "messages")}, "answer": answer}
                for body, answer in zip(self.requests, answers, strict=False)]
