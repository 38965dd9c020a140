"""The sandbox's memory budget: what its settings promise at most must fit in what this host can hold.

A run may add `SANDBOX_MEMORY_MB` of address space, and at the `namespaces` level its /tmp is a tmpfs, which is
memory too; one-shot runs are at most `SANDBOX_SLOTS` at once, and each of up to `SANDBOX_WORKERS` stateful
workers keeps what its session's cells left (an idle worker's memory is not given back). So the promise is
(slots + workers) × (memory + /tmp) plus the zygote's image cache. The budget is this host's memory, or the
memory limit of the cgroup the server runs in where that is lower, or `SANDBOX_MEMORY_BUDGET_MB` where that is
lower still. Counts the operator set that promise more are refused at start-up (`SandboxBudgetError`, saying
what to lower); counts left at their defaults are lowered to fit (workers first, to 1, then slots, to 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a number near 2**63


class SandboxBudgetError(ValueError):
    """The sandbox's settings promise more memory than the host has."""


@dataclass(frozen=True)
class Promise:
    slots: int
    workers: int
    memory_mb: int  # per run
    tmp_mb: int  # per run, at the namespaces level
    image_cache_mb: int

    @property
    def mb(self) -> int:
        return (self.slots + self.workers) * (self.memory_mb + self.tmp_mb) + self.image_cache_mb

    def text(self) -> str:
        return (f"{self.mb} MiB ((SANDBOX_SLOTS {self.slots} + SANDBOX_WORKERS {self.workers}) x (SANDBOX_MEMORY_MB "
                f"{self.memory_mb} + {self.tmp_mb} MiB of /tmp) + SANDBOX_IMAGE_CACHE_MB {self.image_cache_mb})")


def fit(promise: Promise, budget_mb: int, *, slots_set: bool, workers_set: bool) -> Promise:
    """`promise`, with the counts not set by the operator lowered until it fits in `budget_mb`."""
    asked = promise
    while promise.mb > budget_mb and not workers_set and promise.workers > 1:
        promise = Promise(promise.slots, promise.workers - 1, promise.memory_mb, promise.tmp_mb,
                          promise.image_cache_mb)
    while promise.mb > budget_mb and not slots_set and promise.slots > 1:
        promise = Promise(promise.slots - 1, promise.workers, promise.memory_mb, promise.tmp_mb,
                          promise.image_cache_mb)
    if promise.mb > budget_mb:
        raise SandboxBudgetError(
            f"the sandbox's settings promise {asked.text()} of memory, and this server may give it {budget_mb} "
            "MiB (this host's memory, its cgroup's limit or SANDBOX_MEMORY_BUDGET_MB, whichever is least): lower "
            "SANDBOX_SLOTS, SANDBOX_WORKERS or SANDBOX_MEMORY_MB")
    return promise


def budget_mb(setting_mb: int | None) -> int:
    host = host_memory_bytes() // MiB
    return host if setting_mb is None else min(setting_mb, host)


def host_memory_bytes() -> int:
    """This host's memory (MemTotal), or the least memory limit of the cgroups the server is in, if lower."""
    total = UNLIMITED
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
    return min([total, *_cgroup_limits()])


def _cgroup_limits() -> list[int]:
    """The memory limits of this process's cgroup and its ancestors (cgroup v2 `memory.max`, v1
    `memory.limit_in_bytes`), where they can be read."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = Path("/sys/fs/cgroup"), "memory.max"
        elif "memory" in controllers.split(","):
            base, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
        else:
            continue
        here = base / path.lstrip("/")
        for directory in [here, *here.parents]:
            if not directory.is_relative_to(base):
                break
            try:
                value = (directory / name).read_text().strip()
            except OSError:
                continue
            if value.isdigit() and int(value) < UNLIMITED:
                limits.append(int(value))
    return limits
