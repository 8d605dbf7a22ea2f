"""``Agent``: one process simulating many machines of a cell (hollow machine agents).

It keeps a watch-fed ``Replica`` of the cell. Each step it pumps the replica until the next
thing due (a batch task end, a random failure, a repair) or new state arrives, then:

- looks at the machines of its selection whose ledger changed (every alloc write changes the
  machine's ledger, so an unchanged machine revision means unchanged allocs): new allocs get
  their batch end scheduled (``placed_at + duration_s / time_scale``, so a restarted process
  resumes where it was), a down machine with allocs left is evicted, a draining machine's
  service tasks are moved;
- marks placed tasks running (one txn per job, guarded by the job's revision);
- ends the batch tasks that are due (one txn per job: machines' and job's revisions compared);
- fails a random machine when the seeded failure clock says so, and repairs machines.

Every txn is rebuilt from fresh replica state after a lost race (``TxnRunner``). A machine,
job or alloc key whose value does not decode or names another id is quarantined by the replica
(counted in ``omega_agent_quarantined_keys``) and left alone, never fatal.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from cellstate.devices import binding_problem, visible_devices
from cellstate.keys import CellKeys
from cellstate.lifecycle_txn import LedgerError, finish_batch_limit, finish_task_ops, start_task_ops
from cellstate.model import Alloc, MachineState
from cellstate.replica.watched import Replica
from cellstate.store import Store, StoreError
from cellstate.plan import MachineEntry
from tools.agents.failures import FailureInjector, MachineOps
from tools.agents.lifecycle import (
    EndSchedule, MachineNeed, MachineSelector, DueEnd, end_time, machine_need, startable,
)
from tools.agents.metrics import AgentMetrics
from tools.agents.runner import TxnGaveUp, TxnRunner

log = logging.getLogger("omega.agents")
_LIVE = "ar"
RETRY_DELAY = 0.5  # seconds before work that gave up is tried again
# The replica gives an outage up after this long and ``run`` lists the cell again; short, so a
# stop request is honoured within seconds during an outage (not after the replica's 30 s).
REPLICA_GIVE_UP_S = 5.0


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """How the agents behave; see ``omega agents run --help``."""

    name: str = "agents"
    machines: MachineSelector = field(default_factory=lambda: MachineSelector(prefix=""))
    time_scale: float = 1.0
    fail_rate: float = 0.0          # failures per machine per (simulated) hour
    repair_after: float = 0.0       # (simulated) seconds from failure to repair; 0: never
    seed: int = 0
    attempts: int = 8               # lost races in a row before a txn is put off
    scan_interval: float = 0.02     # at most this often the machines are re-examined
    idle_wait: float = 0.5          # longest pump when nothing is due

    def __post_init__(self):
        if not self.name or "/" in self.name:
            raise ValueError(f'agent name must be non-empty without "/", got {self.name!r}')
        for name in ("time_scale", "scan_interval", "idle_wait"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.fail_rate < 0 or self.repair_after < 0 or self.attempts < 1:
            raise ValueError(f"need fail_rate >= 0, repair_after >= 0, attempts >= 1; got "
                             f"{self.fail_rate}, {self.repair_after}, {self.attempts}")

    @property
    def writer(self) -> str:
        return f"agent:{self.name}"


class Agent:
    """Simulates the selected machines of the cell under ``keys`` (see the module docstring)."""

    def __init__(self, store: Store, keys: CellKeys, config: AgentConfig = AgentConfig(),
                 metrics: AgentMetrics | None = None, clock: Callable[[], float] = time.time):
        self.store, self.keys, self.config = store, keys, config
        self.metrics = metrics or AgentMetrics(cell=keys.cell, agent=config.name)
        self.clock = clock
        self.replica = Replica(store, keys, give_up_after=REPLICA_GIVE_UP_S)
        rng = random.Random(config.seed)
        self.runner = TxnRunner(store, self.replica, self.metrics, random.Random(rng.random()), config.attempts)
        self.ops = MachineOps(store, keys, self.replica, self.runner, config.writer)
        self.injector = FailureInjector(random.Random(rng.random()), config.fail_rate, config.repair_after,
                                        config.time_scale)
        self.ends = EndSchedule()
        self._mine: dict[str, bool] = {}
        self._seen: dict[str, int] = {}          # machine id -> mod_revision at last look
        self._running_on: dict[str, int] = {}
        self._touched: set[str] = set()          # machines whose allocs we changed without a ledger write
        self._to_start: set[str] = set()         # job ids
        self._to_evict: dict[str, MachineNeed] = {}
        self._scanned_revision = -1
        self._scanned_at = -math.inf
        self._retry_at = math.inf

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """List the cell, take stock of the machines, plan failures and pending repairs."""
        self.replica.sync()
        now = self.clock()
        self._scan(now)
        for entry in self._my_machines():
            machine = entry.machine
            if machine.state is MachineState.DOWN and machine.writer == self.config.writer:
                self.injector.plan_repair(machine.id, now)
        self.injector.plan_next_failure(now, len(self._up_machines()))
        log.info("agents started agent=%s cell=%s machines=%d revision=%d", self.config.name, self.keys.cell,
                 len(self._seen), self.replica.revision)

    def run(self, stop: threading.Event) -> None:
        """``step`` until ``stop`` is set (call ``start`` first). After a store error (an outage
        the replica gave up on) the agents wait a second and list the cell again."""
        broken = False
        while not stop.is_set():
            try:
                if broken:
                    self.resync()
                    broken = False
                self.step()
            except StoreError as exc:
                log.warning("agents: store error, listing the cell again in 1s: %s", exc)
                broken = True
                stop.wait(1.0)
        log.info("agents stopped agent=%s finished=%d", self.config.name,
                 int(self.metrics.value("omega_agent_tasks_finished_total")))

    def resync(self) -> None:
        """List the cell again and re-examine every machine."""
        self.replica.sync()
        self._seen.clear()
        self._scan(self.clock())

    def close(self) -> None:
        self.replica.close()

    def step(self, max_wait: float | None = None) -> None:
        """Pump the replica until something is due (at most ``max_wait`` s), then do what is due."""
        now = self.clock()
        wake = min(self.ends.next_at(), self.injector.next_event_at(), self._retry_at,
                   now + (self.config.idle_wait if max_wait is None else max_wait))
        if self.replica.revision != self._scanned_revision:
            wake = min(wake, self._scanned_at + self.config.scan_interval)
        self.replica.pump(timeout=max(0.0, wake - now))
        now = self.clock()
        if self.replica.revision != self._scanned_revision and now >= self._scanned_at + self.config.scan_interval:
            self._scan(now)
        self._work(now)

    # -- looking at the machines ------------------------------------------------------------

    def is_mine(self, machine_id: str) -> bool:
        mine = self._mine.get(machine_id)
        if mine is None:
            mine = self._mine[machine_id] = self.config.machines.matches(machine_id)
        return mine

    def _my_machines(self) -> list[MachineEntry]:
        return [entry for entry in self.replica.machines() if self.is_mine(entry.machine.id)]

    def _up_machines(self) -> list[str]:
        return [e.machine.id for e in self._my_machines() if e.machine.state is MachineState.UP]

    def _scan(self, now: float) -> None:
        """Re-examine the machines whose ledger changed (or whose allocs we changed)."""
        self._scanned_revision, self._scanned_at = self.replica.revision, now
        present = set()
        for entry in self._my_machines():
            machine_id = entry.machine.id
            present.add(machine_id)
            if self._seen.get(machine_id) != entry.mod_revision or machine_id in self._touched:
                self._seen[machine_id] = entry.mod_revision
                self._look_at(entry, now)
        self._touched.clear()
        for gone in [m for m in self._seen if m not in present]:
            del self._seen[gone]
            self._running_on.pop(gone, None)
        self.metrics.machines.set(len(present))
        self.metrics.quarantined.set(len(self.replica.quarantine))
        self.metrics.running_tasks.set(sum(self._running_on.values()))

    def _look_at(self, entry: MachineEntry, now: float) -> None:
        machine_id = entry.machine.id
        allocs = list(self.replica.allocs_on(machine_id))
        self._running_on[machine_id] = sum(1 for a in allocs if a.running)
        job = self.replica.job
        for alloc in allocs:
            at = end_time(alloc, job(alloc.job_id), self.config.time_scale, now)
            if at is not None:
                self.ends.add(DueEnd(at, alloc.job_id, alloc.task_index, machine_id, alloc.placed_at))
        self._to_start.update(startable(allocs, job))
        need = machine_need(entry, allocs, job)
        if need is not MachineNeed.NOTHING:
            self._to_evict[machine_id] = need

    # -- doing what is due ------------------------------------------------------------------

    def _work(self, now: float) -> None:
        self._retry_at = math.inf
        for machine_id, need in list(self._to_evict.items()):
            del self._to_evict[machine_id]
            if need is MachineNeed.EVICT_ALL:
                self._guarded(lambda: self.fail(machine_id, count=False), f"failure of {machine_id}",
                              lambda: self._to_evict.setdefault(machine_id, need))
            else:
                self._guarded(lambda: self.ops.drain(machine_id), f"drain of {machine_id}",
                              lambda: self._to_evict.setdefault(machine_id, need))
        for job_id in sorted(self._to_start):
            self._to_start.discard(job_id)
            self._guarded(lambda: self._start_job(job_id), f"start of job {job_id}",
                          lambda: self._to_start.add(job_id))
        self._end_due(now)
        self._inject_failures(now)

    def _guarded(self, action: Callable[[], object], what: str, requeue: Callable[[], object]) -> None:
        """Run ``action``; after too many lost races requeue it, after a bad ledger log and drop it."""
        try:
            action()
        except TxnGaveUp as exc:
            log.warning("agents: %s put off: %s", what, exc)
            requeue()
            self._retry_at = min(self._retry_at, self.clock() + RETRY_DELAY)
        except LedgerError as exc:
            log.error("agents: %s dropped: %s", what, exc)

    def _start_job(self, job_id: str) -> None:
        """Mark the job's placed tasks on our machines running (in txns of max_txn_ops - 1)."""
        while True:
            chunk: list[Alloc] = []
            if self.runner.commit(lambda: self._start_txn(job_id, chunk), f"start of job {job_id}") is None:
                return
            self.metrics.tasks_started.inc(len(chunk))
            self._touched.update(a.machine_id for a in chunk)
            for alloc in chunk:
                log.debug("task started agent=%s job=%s task=%d machine=%s devices=%s", self.config.name, job_id,
                          alloc.task_index, alloc.machine_id, visible_devices(alloc.resources) or "-")

    def _start_txn(self, job_id: str, out: list[Alloc]):
        entry = self.replica.job(job_id)
        if entry is None or entry.record.killed:
            return None
        tasks = entry.record.tasks
        allocs = [a for a in self.replica.allocs_of(job_id) if not a.running and a.task_index < len(tasks)
                  and tasks[a.task_index] == "a" and self.is_mine(a.machine_id) and self._devices_ok(a)]
        out[:] = allocs[:max(1, self.store.max_txn_ops - 1)]
        return start_task_ops(self.keys, entry, out) if out else None

    def _devices_ok(self, alloc: Alloc) -> bool:
        """An alloc asking GPUs runs only on the devices it names, and only when they exist on
        its machine (the committer guarantees it; a runtime checks what it is given)."""
        if not alloc.resources.extra:
            return True
        entry = self.replica.machine(alloc.machine_id)
        problem = None if entry is None else binding_problem(alloc.resources, entry.machine.capacity)
        if problem is not None:
            log.error("agents: task %s/%d not started on %s: %s", alloc.job_id, alloc.task_index,
                      alloc.machine_id, problem)
            return False
        return True

    def _end_due(self, now: float) -> None:
        by_job: dict[str, dict[int, DueEnd]] = {}
        for end in self.ends.pop_due(now):
            by_job.setdefault(end.job_id, {})[end.task_index] = end
        for job_id, wanted in by_job.items():
            self._guarded(lambda: self._finish_job(job_id, wanted, now), f"end of tasks of job {job_id}",
                          lambda: self._put_off(wanted.values()))

    def _put_off(self, ends) -> None:
        later = self.clock() + RETRY_DELAY
        for end in ends:
            self.ends.add(DueEnd(later, end.job_id, end.task_index, end.machine_id, end.placed_at))

    def _finish_job(self, job_id: str, wanted: dict[int, DueEnd], now: float) -> None:
        """End the wanted tasks of one job (those still placed as scheduled), in as few txns as fit."""
        while wanted:
            chunk: list[Alloc] = []
            if self.runner.commit(lambda: self._finish_txn(job_id, wanted, chunk), f"end of job {job_id}") is None:
                return
            self.metrics.tasks_finished.inc(len(chunk))
            for alloc in chunk:
                end = wanted.pop(alloc.task_index)
                log.debug("task finished agent=%s job=%s task=%d machine=%s late_s=%.3f", self.config.name,
                          job_id, alloc.task_index, alloc.machine_id, now - end.at)

    def _finish_txn(self, job_id: str, wanted: dict[int, DueEnd], out: list[Alloc]):
        entry = self.replica.job(job_id)
        if entry is None:
            return None
        tasks = entry.record.tasks
        allocs, machines = [], {}
        for alloc in self.replica.allocs_of(job_id):
            end = wanted.get(alloc.task_index)
            if end is None or (alloc.machine_id, alloc.placed_at) != (end.machine_id, end.placed_at) \
                    or alloc.task_index >= len(tasks) or tasks[alloc.task_index] not in _LIVE:
                continue
            machine = self.replica.machine(alloc.machine_id)
            if machine is not None:
                allocs.append(alloc)
                machines[alloc.machine_id] = machine
        out[:] = allocs[:finish_batch_limit(self.store.max_txn_ops)]
        if not out:
            return None
        return finish_task_ops(self.keys, entry, out, machines, self.config.writer)

    # -- failures -----------------------------------------------------------------------------

    def fail(self, machine_id: str, count: bool = True) -> int:
        """Fail a machine now (down, everything on it evicted) and plan its repair."""
        evicted = self.ops.fail(machine_id)
        if count:
            self.metrics.machine_failures.inc()
            self.injector.plan_repair(machine_id, self.clock())
            log.info("machine failed agent=%s machine=%s evicted=%d", self.config.name, machine_id, evicted)
        return evicted

    def drain(self, machine_id: str) -> int:
        moved = self.ops.drain(machine_id)
        log.info("machine draining agent=%s machine=%s moved=%d", self.config.name, machine_id, moved)
        return moved

    def repair(self, machine_id: str) -> bool:
        repaired = self.ops.repair(machine_id)
        if repaired:
            log.info("machine repaired agent=%s machine=%s", self.config.name, machine_id)
        return repaired

    def _inject_failures(self, now: float) -> None:
        for machine_id in self.injector.due_repairs(now):
            self._guarded(lambda: self.repair(machine_id), f"repair of {machine_id}",
                          lambda: self.injector.plan_repair(machine_id, self.clock()))
        if now < self.injector.next_failure_at:
            return
        up = self._up_machines()
        victim = self.injector.pick_victim(up)
        if victim is not None:
            self._guarded(lambda: self.fail(victim), f"failure of {victim}", lambda: None)
        self.injector.plan_next_failure(now, max(0, len(up) - 1))
