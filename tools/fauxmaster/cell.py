"""The simulated cell around the replayed schedulers: Borg's "stubbed machines".

``SimCell`` applies trace events to the store at their virtual times (machines join, fail or
leave; jobs are submitted or killed; recorded task ends) and ends batch tasks
``duration_s`` after they were placed (the placement is noticed by ``ObservedCommitter``).
Task ends use ``cellstate.lifecycle_txn.finish_task_ops`` (the agents' txn); machine failures
``fail_machine_ops``; kills ``cellstate.submit.kill_job``. Every change that may let a job
fit (or adds one) wakes the parked schedulers. ``UsageLedger`` follows capacity and
allocation per machine from the same changes, so utilization needs no store scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Mapping, Sequence

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
from cellstate.codec.trusted import pack_machine
from cellstate.committer import StoreCommitter, collateral
from cellstate.fastbuild import builder
from cellstate.keys import CellKeys
from cellstate.gang_commit import evict_gang
from cellstate.lifecycle_txn import fail_machine_ops, finish_batch_limit, finish_task_ops
from cellstate.memory.store import MemoryStore
from cellstate.model import Alloc, Job, JobKind, Machine, MachineState
from cellstate.resources import ZERO
from cellstate.replica.shared_decodes import SharedDecodes
from cellstate.store import Compare, CompareOp, CompareTarget, Put, Store
from cellstate.submit import JobNotFound, kill_job, submit_jobs
from cellstate.plan import CommitOutcome, JobEntry, MachineEntry, Plan
from tools.fauxmaster.clock import EventCore
from tools.fauxmaster.usage_ledger import UsageLedger

AGENT = "fauxmaster"
# entries of the cell's own reads (one of each per task end) and the ops of machine adds,
# built without __init__
_JOB_ENTRY, _MACHINE_ENTRY = builder(JobEntry), builder(MachineEntry)
_PUT, _COMPARE = builder(Put), builder(Compare)
_CREATE, _MOD, _EQ = CompareTarget.CREATE, CompareTarget.MOD, CompareOp.EQ
_UP = MachineState.UP


@dataclass(slots=True)
class CellCounters:
    """What the cell did (reported with the result)."""

    machines_added: int = 0
    machines_failed: int = 0
    jobs_submitted: int = 0
    tasks_submitted: int = 0
    jobs_killed: int = 0
    tasks_ended: int = 0
    trace_ends_of_unplaced_tasks: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    initial_placed: int = 0
    """Recorded t = 0 placements written (``initial_state="recorded"``)."""
    initial_not_placed: dict[str, int] = field(default_factory=dict)
    """Recorded t = 0 placements left pending for the schedulers, by reason."""
    gang_members_evicted: int = 0
    """Tasks of gangs evicted because another member was (a machine failure, a preemption): a gang
    runs whole or not at all (``cellstate.gang_commit.evict_gang``)."""
    durations_ignored: int = 0
    """Jobs submitted with a ``duration_s`` the replay ignores: only batch jobs end after their
    duration (``note_placed``); a service job's tasks end only by the trace's task_end / job_kill."""

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class ObservedCommitter(StoreCommitter):
    """A ``StoreCommitter`` that tells the cell about every committed claim."""

    def __init__(self, store: Store, keys: CellKeys, on_commit: Callable[[Plan], None],
                 on_evict: Callable[[list[Alloc]], None] = lambda allocs: None):
        super().__init__(store, keys)
        self.on_commit = on_commit
        self.on_evict = on_evict

    def commit(self, plan: Plan) -> CommitOutcome:
        outcome = StoreCommitter.commit(self, plan)
        if outcome.committed and plan.claims:
            self.on_commit(plan)
        return outcome

    def gang_placed(self, plan: Plan) -> None:
        """A gang larger than one txn, placed by its last txn (its reservations were not placements)."""
        self.on_commit(plan)

    def gang_evicted(self, allocs: list[Alloc]) -> None:
        """The rest of a gang evicted (``GangCommits.evict``): the cell releases their usage."""
        self.on_evict(allocs)


@dataclass
class JobLog:
    """Per job, for the job records of a replay (``tools.fauxmaster.job_records``): its spec as
    submitted, the machines its tasks were placed on, the last time a task of it ended or it was
    killed."""

    specs: dict[str, Job] = field(default_factory=dict)
    machines: dict[str, set[str]] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)


class SimCell:
    """The store side of a replay (see the module docstring)."""

    def __init__(self, store: Store, keys: CellKeys, core: EventCore, wake: Callable[[], None]):
        self.store = store
        self.keys = keys
        self.core = core
        self.wake = wake
        self.usage = UsageLedger()
        self.counters = CellCounters()
        self.submitted_at: dict[str, float] = {}
        self.run_s: dict[str, float] = {}  # batch jobs' duration_s: they end by themselves (slowdown)
        self.placed_log: dict[str, dict[int, float]] | None = None
        """When set (a trace with per-task ground truth): job → task → when the replay first placed it."""
        self.initial_jobs: set[str] = set()
        """Jobs the recorded t = 0 state placed whole (``tools.fauxmaster.initial_state``)."""
        self.submit_latency = 0.0
        """Seconds from a job's submission after t = 0 to its record reaching the store (the
        schedulers): ``ReplayConfig.submit_latency_s``. Its wait counts from the submission."""
        self._in_flight: set[str] = set()  # submitted, not yet written (submit_latency)
        self.job_log: JobLog | None = None
        """When set (``ReplayConfig.job_records``): each job's spec, machines and end."""
        self._down: set[str] = set()  # machines in the store that failed, were removed or came down
        # the schedulers' replicas decode each value once (a memory store shares the bytes);
        # the cell's own reads of a task's alloc, job and machine share those decodes too
        self.decodes = SharedDecodes() if isinstance(store, MemoryStore) else None
        share = self.decodes.decoder if self.decodes is not None else (lambda decode: decode)
        self._decode_alloc, self._decode_job, self._decode_machine = (
            share(decode_alloc), share(decode_job_record), share(decode_machine))

    def committer(self) -> ObservedCommitter:
        return ObservedCommitter(self.store, self.keys, self.note_placed, self.note_evicted)

    def note_evicted(self, allocs: list[Alloc]) -> None:
        """Allocs a scheduler evicted outside a placement (the rest of a gang): usage released."""
        self.usage.release(allocs)
        self.counters.gang_members_evicted += len(allocs)
        self.wake()

    # -- machines ---------------------------------------------------------------------------

    def add_machines(self, machines: list[Machine]) -> None:
        """Write new machines (ids already up in the cell are skipped and counted; a failed or
        removed one comes back up: ``_repair``), in txns of at most the store's op limit of
        machines (a compare and a put each: the limit is per branch). A machine added down is
        written, but counts for utilization only once repaired."""
        fresh = []
        for machine in machines:
            if machine.id in self.usage.machines:
                self.counters.skip("machine_add of a machine already up")
            elif machine.id in self._down:
                self._repair(machine)
            else:
                fresh.append(machine.with_ledger(machine.allocated, machine.task_count, AGENT))
        step, machine_key, add = max(1, self.store.max_txn_ops), self.keys.machine, self.usage.add_machine
        for i in range(0, len(fresh), step):
            chunk = fresh[i:i + step]
            ops = [_PUT(machine_key(m.id), pack_machine(m), 0) for m in chunk]
            missing = [_COMPARE(op.key, _CREATE, _EQ, 0) for op in ops]  # each key
            if not self.store.txn(missing, ops, []).succeeded:
                raise RuntimeError(f"machines {[m.id for m in chunk]}: adding them lost a race in a "
                                   "single-threaded replay")
            for machine in chunk:
                if machine.state is _UP:
                    add(machine)
                else:
                    self._down.add(machine.id)
        self.counters.machines_added += len(fresh)
        if fresh:
            self.wake()

    def _repair(self, machine: Machine) -> None:
        """A ``machine_add`` of a failed or removed machine: it comes back up with the event's
        spec and an empty ledger (as the agents' repair; counted in ``machines_added``)."""
        if machine.state is not _UP:
            self.counters.skip("machine_add of a machine down, still down")
            return
        key = self.keys.machine(machine.id)
        fresh = machine.with_ledger(ZERO, 0, AGENT)
        seen = self.store.get(key).mod_revision
        if not self.store.txn([_COMPARE(key, _MOD, _EQ, seen)], [_PUT(key, pack_machine(fresh), 0)], []).succeeded:
            raise RuntimeError(f"machine {machine.id}: its repair lost a race in a single-threaded replay")
        self._down.discard(machine.id)
        self.usage.add_machine(fresh)
        self.counters.machines_added += 1
        self.wake()

    def fail_machine(self, machine_id: str) -> None:
        """Machine down: every alloc on it evicted (tasks back to pending), ledger zeroed."""
        kv = self.store.get(self.keys.machine(machine_id))
        if kv is None:
            self.counters.skip("failure of an unknown machine")
            return
        if machine_id in self._down:
            self.counters.skip("failure of a machine already down")
            return
        entry = MachineEntry(decode_machine(kv.key, kv.value), kv.mod_revision)
        every = self._all_allocs()
        allocs = [a for a in every if a.machine_id == machine_id]
        members_of = {a.job_id for a in allocs}
        while True:
            jobs = {job_id: self._job(job_id, [a for a in allocs if a.job_id == job_id])
                    for job_id in {a.job_id for a in allocs}}
            eviction = fail_machine_ops(self.keys, entry, allocs, jobs, AGENT, self.store.max_txn_ops,
                                        self.store.max_request_bytes, self._gang_rest(jobs, every, machine_id))
            result = self.store.txn(*eviction.ops)
            if not result.succeeded:
                raise RuntimeError(f"machine {machine_id}: eviction txn lost a race in a single-threaded replay")
            if eviction.collateral:
                self.usage.release(eviction.collateral)
                self.counters.gang_members_evicted += len(eviction.collateral)
                gone = {(a.job_id, a.task_index) for a in eviction.collateral}
                every = [a for a in every if (a.job_id, a.task_index) not in gone]
            done = {(a.job_id, a.task_index) for a in eviction.evicted}
            allocs = [a for a in allocs if (a.job_id, a.task_index) not in done]
            kv = self.store.get(kv.key)
            entry = MachineEntry(decode_machine(kv.key, kv.value), kv.mod_revision)
            if not allocs:
                break
        self.usage.remove_machine(machine_id)
        self._down.add(machine_id)
        self.counters.machines_failed += 1
        for job_id in sorted(members_of):  # a gang that lost members loses them all
            _, evicted = evict_gang(self.store, self.keys, job_id, f"gang member on machine {machine_id} "
                                    "failed: the whole gang is evicted", AGENT, self.store.max_txn_ops)
            if evicted:
                self.usage.release(evicted)
                self.counters.gang_members_evicted += len(evicted)
        self.wake()

    def _gang_rest(self, jobs: Mapping, every: list[Alloc], machine_id: str) -> dict:
        """For each gang among ``jobs``: its live allocs on other machines, with their machines as
        the store has them (``lifecycle_txn.GangRest``)."""
        rest: dict[str, list] = {}
        for job_id, entry in jobs.items():
            if entry is None or not entry.record.job.gang:
                continue
            tasks = entry.record.tasks
            live = [a for a in every if a.job_id == job_id and a.machine_id != machine_id
                    and 0 <= a.task_index < len(tasks) and tasks[a.task_index] in "ar"]
            for alloc in live:
                kv = self.store.get(self.keys.machine(alloc.machine_id))
                if kv is not None:
                    rest.setdefault(job_id, []).append(
                        (alloc, MachineEntry(self._decode_machine(kv.key, kv.value), kv.mod_revision)))
        return rest

    def _all_allocs(self) -> list[Alloc]:
        return [decode_alloc(kv.key, kv.value) for kv in self.store.range(self.keys.kind_prefix("allocs")).kvs]

    # -- jobs -------------------------------------------------------------------------------

    def submit(self, jobs: list[Job]) -> None:
        """Submit jobs at the current virtual time (ids already submitted are skipped); after
        t = 0 their records reach the store ``submit_latency`` seconds later."""
        submitted_at, now = self.submitted_at, self.core.now
        fresh = []  # a loop, not a comprehension: most runs are of one job
        for job in jobs:
            if job.id not in submitted_at:
                fresh.append(job)
        counters = self.counters
        if len(fresh) < len(jobs):
            why = "job_submit of an id already submitted"
            counters.skipped[why] = counters.skipped.get(why, 0) + len(jobs) - len(fresh)
        if not fresh:
            return
        delayed = self.submit_latency > 0 and now > 0
        if delayed:
            self._in_flight.update(job.id for job in fresh)
            self.core.at(now + self.submit_latency, partial(self._deliver, fresh, now))
        else:
            submit_jobs(self.store, self.keys, fresh, now)
        tasks = 0
        if self.job_log is not None:
            self.job_log.specs.update((job.id, job) for job in fresh)
        for job in fresh:
            submitted_at[job.id] = now
            tasks += job.tasks
            if job.duration_s is not None:
                if job.kind is JobKind.BATCH:
                    self.run_s[job.id] = job.duration_s
                else:
                    counters.durations_ignored += 1
        counters.jobs_submitted += len(fresh)
        counters.tasks_submitted += tasks
        if not delayed:
            self.wake()

    def _deliver(self, jobs: list[Job], at: float) -> None:
        """Write the records of jobs submitted at ``at`` (``submit_latency`` ago) that no kill
        has taken meanwhile."""
        in_flight = self._in_flight
        alive = [job for job in jobs if job.id in in_flight]
        in_flight.difference_update(job.id for job in alive)
        if alive:
            submit_jobs(self.store, self.keys, alive, at)
            self.wake()

    def kill(self, job_id: str) -> None:
        """Kill a job: its allocs released, pending tasks killed."""
        allocs: list[Alloc] = []  # those the kill deleted
        if self.job_log is not None:
            self.job_log.ended[job_id] = self.core.now
        if job_id in self._in_flight:  # killed before its record reached the store
            self._in_flight.discard(job_id)
            self.counters.skip("kill of a job before it reached the schedulers (submit latency)")
            self.counters.jobs_killed += 1
            return
        try:
            kill_job(self.store, self.keys, job_id, released=allocs, now=self.core.now)
        except JobNotFound:
            self.counters.skip("kill of an unknown job")
            return
        self.usage.release(allocs)
        self.counters.jobs_killed += 1
        if allocs:
            self.wake()

    # -- tasks ------------------------------------------------------------------------------

    def note_placed(self, plan: Plan) -> None:
        """Charge a committed plan and schedule the end of its batch tasks (one action: they end
        together, ``duration_s`` after the commit); with a ``placed_log``, note when each task was
        first placed."""
        spec = plan.job.record.job
        log = self.placed_log
        if log is not None:
            first = log.get(spec.id)
            if first is None:
                first = log[spec.id] = {}
            now = self.core.now
            for claim in plan.claims:
                first.setdefault(claim.task_index, now)
        usage = self.usage
        for claim in plan.claims:
            request = claim.request
            usage.charge(claim.machine_id, request.cpu, request.memory)
            if request.extra:
                usage.charge_extra(claim.machine_id, request.extra)
            for victim_id, _ in claim.evicts:
                request = plan.victims[victim_id].record.job.request
                usage.charge(claim.machine_id, -request.cpu, -request.memory)
                if request.extra:
                    usage.charge_extra(claim.machine_id, request.extra, -1)
        if self.job_log is not None:
            self.job_log.machines.setdefault(spec.id, set()).update(claim.machine_id for claim in plan.claims)
        if plan.victim_allocs and len(plan.victim_allocs) > sum(len(c.evicts) for c in plan.claims):
            rest = [plan.victim_allocs[task].alloc for task in collateral(plan)]  # the rest of evicted gangs
            usage.release(rest)
            self.counters.gang_members_evicted += len(rest)
        if spec.kind is JobKind.BATCH and spec.duration_s is not None:
            placed = {claim.task_index: (claim.machine_id, plan.now) for claim in plan.claims}
            self.core.after(spec.duration_s, self._ender(spec.id, placed))

    def _ender(self, job_id: str, placed: dict[int, tuple[str, float]]) -> Callable[[], None]:
        """``end_tasks(job_id, placed)``, to schedule (a partial: no frame of its own)."""
        return partial(self.end_tasks, job_id, placed)

    def end_tasks(self, job_id: str, wanted: Mapping[int, tuple[str, float] | None]) -> int:
        """End the live tasks of ``job_id`` in ``wanted`` (task -> its placement (machine,
        placed_at), or None: whatever its alloc) in as few txns as fit, as the agents end a
        job's due tasks: allocs deleted, ledgers released, tasks 'f'. A task without (such) an
        alloc is left alone. Returns how many tasks ended."""
        left = dict(wanted)
        per_txn = finish_batch_limit(self.store.max_txn_ops)
        ended = 0
        for _ in range(3 + len(left) // per_txn):
            allocs, machines = self._live_allocs(job_id, left, per_txn)
            if not allocs:
                return ended
            job = self._job(job_id, allocs)
            if job is None:
                return ended
            if self.store.txn(*finish_task_ops(self.keys, job, allocs, machines, AGENT)).succeeded:
                for alloc in allocs:
                    del left[alloc.task_index]
                self.usage.release(allocs)
                ended += len(allocs)
                self.counters.tasks_ended += len(allocs)
                if self.job_log is not None:
                    self.job_log.ended[job_id] = self.core.now
                self.wake()
                if not left:
                    return ended
        if left:
            raise RuntimeError(f"end of tasks of {job_id}: txns lost races in a single-threaded replay")
        return ended

    def _live_allocs(self, job_id: str, left: dict[int, tuple[str, float] | None],
                     limit: int) -> tuple[list[Alloc], dict[str, MachineEntry]]:
        """Up to ``limit`` allocs of the tasks in ``left`` still placed as wanted, and their
        machines' entries; the tasks found without (such) an alloc are dropped from ``left``."""
        get, decode_alloc = self.store.get, self._decode_alloc
        alloc_prefix, machine_key = self.keys.job_allocs(job_id), self.keys.machine
        allocs: list[Alloc] = []
        machines: dict[str, MachineEntry] = {}
        gone = []
        for task, placement in left.items():
            kv = get(f"{alloc_prefix}{task}")
            alloc = None if kv is None else decode_alloc(kv.key, kv.value)
            if alloc is None or (placement is not None and (alloc.machine_id, alloc.placed_at) != placement):
                gone.append(task)  # ended, or evicted and placed again: that placement has its own end
                continue
            machine_id = alloc.machine_id
            if machine_id not in machines:
                machine_kv = get(machine_key(machine_id))
                if machine_kv is None:
                    gone.append(task)
                    continue
                machines[machine_id] = _MACHINE_ENTRY(self._decode_machine(machine_kv.key, machine_kv.value),
                                                      machine_kv.mod_revision)
            allocs.append(alloc)
            if len(allocs) == limit:
                break
        for task in gone:
            del left[task]
        return allocs, machines

    def trace_task_end(self, job_id: str, task: int) -> None:
        """A recorded task end: end the task if the replay has it placed (most recorded ends
        are of tasks the replay has not placed: those cost one read, of the alloc, before any of
        ``end_tasks``' bookkeeping)."""
        if self.store.get(self.keys.alloc(job_id, task)) is None or not self.end_tasks(job_id, {task: None}):
            self.counters.trace_ends_of_unplaced_tasks += 1

    def _job(self, job_id: str, allocs: Sequence[Alloc] = ()) -> JobEntry | None:
        """The job's entry as stored, with the tasks of ``allocs`` (allocations of it read from
        the store) placed if the record has them pending (``JobRecord.with_allocs``: placements
        write no record)."""
        kv = self.store.get(self.keys.job(job_id))
        if kv is None:
            return None
        record = self._decode_job(kv.key, kv.value)
        return _JOB_ENTRY(record.with_allocs(allocs) if allocs else record, kv.mod_revision)
