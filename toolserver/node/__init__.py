"""One node, all of it: `toolserver serve --workers N` (the supervisor, and the services its workers share)."""

from toolserver.node.services import NodeError
from toolserver.node.supervisor import available_cores, plan_workers, run_node

__all__ = ["NodeError", "available_cores", "plan_workers", "run_node"]
