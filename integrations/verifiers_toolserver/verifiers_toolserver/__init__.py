"""verifiers v1 taskset over a running toolserver (docs/verifiers.md): `ToolserverTaskset`, loaded by verifiers as
the taskset `verifiers-toolserver`."""

from verifiers_toolserver.taskset import ToolserverTaskset

__all__ = ["ToolserverTaskset"]
