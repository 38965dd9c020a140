"""The zygote's stateful workers: one confined process per session whose namespace lives from cell to cell.

Bookkeeping only (the zygote forks, feeds and kills them): which worker serves which id, which slots (uids and
working directories of their own, apart from the one-shot executions' slots) are free, and which idle worker
goes first when a new one needs a slot (the least recently used).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class Worker:
    worker_id: str
    pid: int
    slot: int
    to_worker: int  # the write end of its requests pipe
    from_worker: int  # the read end of its results pipe
    busy: bool = False
    last_used: float = field(default_factory=time.monotonic)
    level: str = "restricted"
    disk_bytes: int = 128 << 20  # its disk quota (`quota.py`)


class Workers:
    def __init__(self, slots: list[int]):
        self.free_slots = list(slots)
        self.by_id: OrderedDict[str, Worker] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, worker_id: str) -> Worker | None:
        worker = self.by_id.get(worker_id)
        if worker is not None:
            self.by_id.move_to_end(worker_id)
            worker.last_used = time.monotonic()
        return worker

    def add(self, worker: Worker) -> None:
        self.by_id[worker.worker_id] = worker

    def remove(self, worker_id: str) -> Worker | None:
        return self.by_id.pop(worker_id, None)

    def take_slot(self) -> int | None:
        return self.free_slots.pop() if self.free_slots else None

    def release_slot(self, slot: int) -> None:
        self.free_slots.append(slot)

    def least_recent_idle(self) -> Worker | None:
        return next((w for w in self.by_id.values() if not w.busy), None)

    def all(self) -> list[Worker]:
        return list(self.by_id.values())
