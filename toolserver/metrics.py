"""Prometheus metrics, one registry per server instance (so tests can run several side by side)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.tool_calls = Counter("toolserver_tool_calls", "Tool calls by outcome", ["tool", "outcome"], registry=r)
        self.tool_errors = Counter("toolserver_tool_errors", "Failed tool calls by code", ["tool", "code"],
                                   registry=r)
        self.tool_replays = Counter("toolserver_tool_replays", "Tool calls answered from their recorded outcome "
                                    "(a retry with the same idempotency key)", registry=r)
        self.tool_latency = Histogram("toolserver_tool_latency_seconds", "Tool call latency", ["tool"],
                                      buckets=LATENCY_BUCKETS, registry=r)
        self.overloaded = Counter("toolserver_overloaded", "Requests refused with 429", registry=r)
        self.sessions_created = Counter("toolserver_sessions_created", "Sessions created", registry=r)
        self.sandbox_executions = Counter("toolserver_sandbox_executions", "Code executions by outcome (ok, "
                                          "error, timeout, cpu_limit, output_too_large, crashed, ...)", ["outcome"],
                                          registry=r)
        self.validations = Counter("toolserver_validations", "Checks run by /v1/validate", registry=r)
        self.delivery_seconds = Histogram("toolserver_delivery_seconds", "Delivering a tool image, by stage: "
                                          "encode (PNG/JPEG/WebP, in a worker thread or an encode process), base64, "
                                          "write (a `path` or `shm` file), hold (a node's raw pixels)", ["stage"],
                                          buckets=LATENCY_BUCKETS,
                                          registry=r)
        self.model_batch_size = Histogram("toolserver_model_batch_size", "For each model call, how many calls (of "
                                          "any sessions) ran in its batch", ["model"], buckets=BATCH_BUCKETS,
                                          registry=r)
        self.model_served_by = Counter("toolserver_model_calls_served", "Model calls answered by each of the node's "
                                       "model host processes (`served_by`: index/device)", ["model", "served_by"],
                                       registry=r)

    def gauge(self, name: str, doc: str, fn: Callable[[], float]) -> None:
        Gauge(name, doc, registry=self.registry).set_function(fn)

    def render(self) -> bytes:
        return generate_latest(self.registry)
