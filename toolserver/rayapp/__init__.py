"""toolserver as a Ray Serve application, on the trainer's own Ray cluster.

`build` is the application builder the Serve config names (`import_path: toolserver.rayapp:build`): the ingress
deployment serving the same FastAPI app as `toolserver serve` (every route), and the models (SMFANet, the CLIP and
text encoders) as deployments of their own, reached through handles, their calls of every session batched. Which
models get a deployment is the builder's one argument (`models`, default all three); the others run inside each
ingress replica. Everything else (placement, replicas, queues, environment) is the config file's.
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from toolserver.core.modelset import MODEL_NAMES
from toolserver.rayapp.deployments import Ingress, ModelServer, RayTransport, refuse_process_state

__all__ = ["Ingress", "ModelServer", "RayTransport", "build", "refuse_process_state"]


def build(args: dict[str, Any] | None = None) -> Application:
    """The application: `args["models"]` names the models that run as deployments (a list, or a comma-separated
    string; `[]` or `""` keeps every model inside the ingress replicas)."""
    wanted = (args or {}).get("models", list(MODEL_NAMES))
    names = [n.strip() for n in wanted.split(",")] if isinstance(wanted, str) else list(wanted)
    names = [n for n in names if n]
    unknown = sorted(set(names) - set(MODEL_NAMES))
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; models: {', '.join(MODEL_NAMES)}")
    # The decorators make deployments of the classes; mypy sees the classes.
    handles = {name: ModelServer.options(name=name).bind(name) for name in names}  # type: ignore[attr-defined]
    return Ingress.bind(**handles)  # type: ignore[attr-defined]
