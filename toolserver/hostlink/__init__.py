"""Reaching models that run in their own processes on this node (`toolserver.core.modelhosts` starts them).

`wire`: the framed, authenticated socket protocol both ends speak. `client`: `HostTransport`, the `Transport` a
worker process's model fronts hold, spreading their calls over the node's model hosts."""

from toolserver.hostlink.client import HostPool, HostTransport, node_transports
from toolserver.hostlink.wire import ModelHostError, ModelHostFailed, ModelHostLost, ModelHostTimeout

__all__ = ["HostPool", "HostTransport", "ModelHostError", "ModelHostFailed", "ModelHostLost", "ModelHostTimeout",
           "node_transports"]
