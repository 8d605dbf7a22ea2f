"""Machine failures, drains and repairs: when they happen (``FailureInjector``) and the
transactions that carry them out (``MachineOps``).

Failing a machine puts it down and evicts every alloc on it (tasks back to 'p' with the reason
"machine X failed", ledger zeroed), one txn per machine when it fits, otherwise several txns of
whole jobs. Draining puts it in ``draining`` and moves its service tasks (back to 'p'); batch
tasks keep running and end normally. Repairing brings a down machine back up, empty.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from typing import Iterable

from cellstate.keys import CellKeys
from cellstate.gang_commit import evict_gang
from cellstate.lifecycle_txn import drain_machine_ops, fail_machine_ops, repair_machine_ops
from cellstate.model import MachineState
from cellstate.replica.watched import Replica
from cellstate.store import Store
from tools.agents.lifecycle import failure_delay, service_allocs
from tools.agents.runner import TxnRunner

log = logging.getLogger(__name__)


class FailureInjector:
    """Random machine failures at ``rate_per_hour`` per machine (seeded) and repairs
    ``repair_after`` seconds after a failure (0: never). Both run ``time_scale`` times faster."""

    def __init__(self, rng: random.Random, rate_per_hour: float = 0.0, repair_after: float = 0.0,
                 time_scale: float = 1.0):
        if rate_per_hour < 0 or repair_after < 0 or time_scale <= 0:
            raise ValueError(f"need fail rate >= 0, repair-after >= 0 and time scale > 0, got "
                             f"{rate_per_hour}, {repair_after}, {time_scale}")
        self.rng = rng
        self.rate_per_hour = rate_per_hour
        self.repair_after = repair_after
        self.time_scale = time_scale
        self.next_failure_at = math.inf
        self._repairs: list[tuple[float, str]] = []

    def plan_next_failure(self, now: float, up_machines: int) -> None:
        """Draw the time of the next random failure among ``up_machines`` machines."""
        self.next_failure_at = now + failure_delay(self.rng, self.rate_per_hour, up_machines, self.time_scale)

    def pick_victim(self, up_machine_ids: Iterable[str]) -> str | None:
        """A machine to fail, uniformly among the up ones (sorted, so a seed replays)."""
        candidates = sorted(up_machine_ids)
        return self.rng.choice(candidates) if candidates else None

    def plan_repair(self, machine_id: str, now: float) -> None:
        """Repair ``machine_id`` ``repair_after`` (scaled) seconds from ``now``, if repairs are on."""
        if self.repair_after > 0:
            heapq.heappush(self._repairs, (now + self.repair_after / self.time_scale, machine_id))

    def due_repairs(self, now: float) -> list[str]:
        due = []
        while self._repairs and self._repairs[0][0] <= now:
            due.append(heapq.heappop(self._repairs)[1])
        return due

    def next_event_at(self) -> float:
        """The earlier of the next random failure and the next repair (inf: none)."""
        return min(self.next_failure_at, self._repairs[0][0] if self._repairs else math.inf)


class MachineOps:
    """Fail, drain and repair machines of a cell through a ``TxnRunner`` (replica-built txns)."""

    def __init__(self, store: Store, keys: CellKeys, replica: Replica, runner: TxnRunner, writer: str,
                 max_txns: int = 1000):
        self.store = store
        self.keys = keys
        self.replica = replica
        self.runner = runner
        self.writer = writer
        self.max_txns = max_txns

    def fail(self, machine_id: str) -> int:
        """Put the machine down and evict everything on it; returns the tasks evicted."""
        return self._evict(machine_id, MachineState.DOWN)

    def drain(self, machine_id: str) -> int:
        """Put the machine in draining (a down machine stays down) and move its service tasks;
        returns the tasks moved."""
        return self._evict(machine_id, MachineState.DRAINING)

    def repair(self, machine_id: str) -> bool:
        """Bring a down machine up, empty (evicting anything still on it first); False when the
        machine is gone or no longer down."""
        entry = self.replica.machine(machine_id)
        if entry is None or entry.machine.state is not MachineState.DOWN:
            return False
        self.fail(machine_id)

        def build():
            fresh = self.replica.machine(machine_id)
            if fresh is None or fresh.machine.state is not MachineState.DOWN or \
                    any(True for _ in self.replica.allocs_on(machine_id)):
                return None
            return repair_machine_ops(self.keys, fresh, self.writer)

        return self.runner.commit(build, f"repair of machine {machine_id}") is not None

    def _evict(self, machine_id: str, state: MachineState) -> int:
        """Txns until the machine is in ``state`` (or down) with nothing left to evict."""
        if self.replica.machine(machine_id) is None:
            raise ValueError(f"no machine {machine_id!r} in cell {self.keys.cell!r}")
        evicted = 0
        jobs: set[str] = set()
        for _ in range(self.max_txns):
            batch: list = []
            result = self.runner.commit(lambda: self._eviction(machine_id, state, batch),
                                        f"{state.value} of machine {machine_id}")
            if result is None:
                return evicted + self._evict_gangs(jobs, machine_id)
            evicted += len(batch)
            jobs.update(a.job_id for a in batch)
        raise RuntimeError(f"machine {machine_id!r}: still not {state.value} after {self.max_txns} txns")

    def _evict_gangs(self, jobs: set[str], machine_id: str) -> int:
        """Evict the rest of each gang among ``jobs`` that lost members here (a gang runs whole or
        not at all, ``evict_gang``); the tasks evicted."""
        evicted = 0
        for job_id in sorted(jobs):
            entry = self.replica.job(job_id)
            if entry is None or not entry.record.job.gang:
                continue
            _, allocs = evict_gang(self.store, self.keys, job_id, f"gang member on machine {machine_id} evicted: "
                                   "the whole gang is evicted", self.writer, self.store.max_txn_ops)
            evicted += len(allocs)
        return evicted

    def _eviction(self, machine_id: str, state: MachineState, out: list):
        """The next eviction txn from the replica (None: done); the allocs it evicts go to ``out``."""
        entry = self.replica.machine(machine_id)
        if entry is None:
            return None
        current = entry.machine.state
        allocs = list(self.replica.allocs_on(machine_id))
        if state is MachineState.DRAINING and current is not MachineState.DOWN:
            allocs = service_allocs(allocs, self.replica.job)
        else:
            state = MachineState.DOWN
        if current is state and not allocs:
            return None
        jobs = {a.job_id: self.replica.job(a.job_id) for a in allocs}
        if state is MachineState.DOWN:
            eviction = fail_machine_ops(self.keys, entry, allocs, jobs, self.writer, self.store.max_txn_ops,
                                        self.store.max_request_bytes, self._gang_rest(jobs, machine_id))
        else:
            eviction = drain_machine_ops(self.keys, entry, allocs, jobs, self.writer, self.store.max_txn_ops,
                                         self.store.max_request_bytes)
        out[:] = eviction.evicted + eviction.collateral
        return eviction.ops

    def _gang_rest(self, jobs: dict, machine_id: str) -> dict:
        """For each gang among ``jobs``: its live allocs on other machines with their machines, from
        the replica (evicted in the failure's txn: ``fail_machine_ops``)."""
        rest: dict[str, list] = {}
        for job_id, entry in jobs.items():
            if entry is None or not entry.record.job.gang:
                continue
            tasks = entry.record.tasks
            for alloc in self.replica.allocs_of(job_id):
                seen = self.replica.machine(alloc.machine_id)
                if (alloc.machine_id != machine_id and seen is not None and 0 <= alloc.task_index < len(tasks)
                        and tasks[alloc.task_index] in "ar"):
                    rest.setdefault(job_id, []).append((alloc, seen))
        return rest
