"""Test helpers of the optimistic loop: the real placement view (re-exported), a fake clock,
cell seeding and a small least-loaded decide function."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cellstate.codec.records import decode_machine, encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.model import Job, JobKind, JobRecord, Machine
from cellstate.replica.view import ReplicaView  # noqa: F401  (the real adapter; tests import it from here)
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.plan import Claim, JobEntry
from omega.protocols import Decision


@dataclass
class FakeClock:
    """Virtual time: ``sleep`` advances it and is recorded."""

    t: float = 100.0
    sleeps: list[float] = field(default_factory=list)

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


def machine(machine_id: str, cpu: int = 4000) -> Machine:
    return Machine(machine_id, Resources(cpu, 16384, 100_000))


def batch_job(job_id: str, tasks: int, cpu: int = 1000, gang: bool = False) -> JobRecord:
    return JobRecord.new(Job(job_id, JobKind.BATCH, tasks, Resources(cpu, 512), gang=gang), 1.0)


def seed(store, keys: CellKeys, machines=(), jobs=()) -> int:
    """Write machines and job records in one txn; the revision."""
    ops = [Put(keys.machine(m.id), encode_machine(m)) for m in machines]
    ops += [Put(keys.job(r.id), encode_job_record(r)) for r in jobs]
    return store.txn((), ops).revision


def touch_machine(store, keys: CellKeys, machine_id: str, writer: str = "rival") -> int:
    """Rewrite a machine unchanged but for its writer: its revision moves, its ledger does not."""
    kv = store.get(keys.machine(machine_id))
    current = decode_machine(kv.key, kv.value)
    return store.put(kv.key, encode_machine(replace(current, writer=writer)))


def least_loaded(job: JobEntry, tasks: list[int], view) -> Decision:
    """Each task on the up machine with the most free cpu (ties: machine id), counting the
    claims made so far; tasks that fit nowhere are unplaced."""
    free = {m.id: m.machine.free for m in view.machines()}
    request = job.record.job.request
    claims, unplaced = [], {}
    for task in tasks:
        fitting = [mid for mid, f in free.items() if request.fits_in(f)]
        if not fitting:
            unplaced[task] = f"no machine has {request.cpu} millicores free"
            continue
        best = min(fitting, key=lambda mid: (-free[mid].cpu, mid))
        free[best] = free[best] - request
        claims.append(Claim(task, best, request))
    return Decision(claims, unplaced)


class RecordingDecide:
    """Wraps a decide function and records the task lists it was asked for."""

    def __init__(self, decide=least_loaded):
        self.decide = decide
        self.calls: list[list[int]] = []

    def __call__(self, job, tasks, view):
        self.calls.append(list(tasks))
        return self.decide(job, tasks, view)


class MeddlingCommitter(StoreCommitter):
    """A committer whose rival rewrites machines just before each commit of a plan with
    at least ``min_claims`` claims: all its machines but ``spare`` of them (``times`` times at
    most; None: always)."""

    def __init__(self, store, keys, spare: int = 1, min_claims: int = 2, times: int | None = None, **kw):
        super().__init__(store, keys, **kw)
        self.spare = spare
        self.min_claims = min_claims
        self.times = times

    def commit(self, plan):
        if len(plan.claims) >= self.min_claims and self.times != 0:
            self.times = None if self.times is None else self.times - 1
            machine_ids = list(dict.fromkeys(c.machine_id for c in plan.claims))
            for machine_id in machine_ids[self.spare:]:
                touch_machine(self.store, self.keys, machine_id)
        return super().commit(plan)
