"""``StoreCommitter``: a placement plan as ONE store transaction (Omega §3.4).

A placement of a job that is not a gang guards each task it places, not the job record
(docs/CELLSTATE.md, "Task state out of the record"):

    compare  mod_revision == seen for every touched machine, every victim job and victim alloc;
             create_revision == 0 (missing) for every claimed task's alloc key and for the
             job's kill marker ``kills/{job}``; the job's mod_revision only when the plan
             changes the record's bookkeeping (below);
    success  put each touched machine with its new ledger (seen ledger + claims - evictions),
             put allocs/{job}/{task} per claim, delete evicted allocs and put the victim job
             records with the evicted tasks back to 'p'; put the job record only when its
             bookkeeping changes: the first attempt (first_attempt_at), the last pending task
             placed (placed_at), a new reason. Otherwise the placement is *record-free*: the
             claimed tasks are placed because their allocs exist (``model.effective_tasks``),
             and the bytes it writes grow with the tasks it places, not the job's size;
    failure  get every compared key, the job record and the claimed alloc keys and the kill
             marker, decoded into fresh entries: the fresh job has the claimed tasks another
             writer placed meanwhile as placed (their allocs in ``fresh_allocs``) and is killed
             when the marker exists, so the conflict split drops those claims.

A gang's plan compares the machines, the job's mod_revision and each claimed alloc key missing
(a dead scheduler's reservation writes allocs without the record), and puts the record with the
claimed tasks 'a' (gang records are never derived).

Bad values are quarantined, never fatal: a failure-branch value that does not decode, or whose
id is not its key's (``machines/m1`` holding machine m2), becomes a None entry (the machine
takes no claims, the job is not placed) and is named in ``CommitOutcome.quarantined`` with its
mod_revision. A plan entry whose id is not the id it is filed under is rejected
(``PlanRejected``) before anything is sent: every key the txn writes is a key it compares (or a
new alloc key), never one derived from a value.

A plan with no claims only updates the job's reason (and first_attempt_at), guarded by the
job's revision; if the record would not change, the txn writes nothing and only checks it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from operator import itemgetter

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.codec.fields import CodecError
from cellstate.codec.trusted import pack_alloc, pack_machine
from cellstate.devices import binding_problem
from cellstate.fastbuild import builder
from cellstate.gang_commit import GangCommits
from cellstate.keys import CellKeys
from cellstate.model import Alloc, JobRecord, Machine, MachineState, TaskState, set_placed, with_states
from cellstate.resources import Resources
from cellstate.store import (
    Compare, CompareOp, CompareTarget, Delete, Get, KeyValue, Put, Store, TxnTooLarge,
)
from cellstate.plan import AllocEntry, CommitOutcome, JobEntry, MachineEntry, Plan, PlanRejected, PlanTooLarge

MAX_REASON_CHARS = 400
_ALLOC, _MACHINE, _MACHINE_ENTRY = builder(Alloc), builder(Machine), builder(MachineEntry)
_JOB_ENTRY, _COMMIT_OUTCOME = builder(JobEntry), builder(CommitOutcome)
_RESOURCES = builder(Resources)
# Txn ops by the hundred per commit: built without their dataclass __init__ (cellstate.fastbuild).
_PUT, _GET, _COMPARE = builder(Put), builder(Get), builder(Compare)
_MOD, _CREATE, _EQ = CompareTarget.MOD, CompareTarget.CREATE, CompareOp.EQ
_DOWN = MachineState.DOWN


def claims_per_txn(max_txn_ops: int) -> int:
    """Claims one txn can hold without evictions: each claim compares its alloc key missing and
    puts the alloc and (at worst) a machine it compares, and the job record and the kill marker
    take one more compare (the record one more put, the marker one more read)."""
    if type(max_txn_ops) is not int or max_txn_ops < 4:
        raise ValueError(f"max_txn_ops must be an int >= 4 to hold one claim, got {max_txn_ops!r}")
    return (max_txn_ops - 2) // 2


def summarize_reasons(unplaced: dict[int, str]) -> str:
    """One line for a job record: the distinct reasons, most frequent first, with task counts."""
    if not unplaced:
        return ""
    reasons = list(unplaced.values())
    if reasons.count(reasons[0]) == len(reasons):  # one reason for all (C-level, by identity first)
        counts = [(reasons[0], len(reasons))]
    else:
        counts = Counter(reasons).most_common()
    parts = [f"{n} task{'s' if n > 1 else ''}: {reason}" for reason, n in counts]
    text = "; ".join(parts)
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "…"


class StoreCommitter:
    """Implements ``omega.protocols.Committer`` on a ``Store`` for the cell under ``keys``.
    ``max_txn_ops`` defaults to the store's limit."""

    def __init__(self, store: Store, keys: CellKeys, max_txn_ops: int | None = None):
        self.store = store
        self.keys = keys
        self.max_txn_ops = store.max_txn_ops if max_txn_ops is None else max_txn_ops
        self.max_claims_per_txn = claims_per_txn(self.max_txn_ops)
        self.gangs = GangCommits(self)
        """Gangs larger than one txn: reserved in chunks, placed by one last txn (omega's GangCommitter)."""

    def gang_placed(self, plan: Plan) -> None:
        """Called with a gang's final plan (every claim) once ``gangs.finish`` committed it."""

    def gang_evicted(self, allocs: list) -> None:
        """Called with the allocs ``gangs.evict`` removed (the rest of a gang a member left)."""

    def commit(self, plan: Plan) -> CommitOutcome:
        """Run the plan's txn; PlanTooLarge if it exceeds the op or request-size limit,
        ValueError if the plan is inconsistent (claims for tasks that are not pending, …)."""
        check_plan(plan)
        ledgers = new_ledgers(plan)
        record = updated_record(plan)
        free = record_free(plan, record)
        compares, keys, gets, alloc_keys = self._compares(plan, ledgers, free)
        success, written, deleted, applied = self._writes(plan, ledgers, keys, alloc_keys,
                                                          None if free else record)
        result = self._send("plan", plan, compares, success, gets)
        if result.succeeded:
            return self._success(result.revision, written, deleted, applied)
        return self._failure(plan, result.revision, result.reads)

    def _send(self, what: str, plan: Plan, compares: list, success: list, gets: list):
        """Run the txn of ``plan`` (``what``: "plan", "gang chunk"…, for the message);
        PlanTooLarge if it exceeds the op limit (checked before sending) or the store's
        request-size limit."""
        ops = len(compares) if len(compares) > len(success) else len(success)
        if ops > self.max_txn_ops:
            raise PlanTooLarge(f"{what} for job {plan.job.id!r} ({len(plan.claims)} claims) needs {ops} "
                               f"txn operations; the limit is {self.max_txn_ops}")
        try:
            return self.store.txn(compares, success, gets)
        except TxnTooLarge as exc:
            raise PlanTooLarge(f"{what} for job {plan.job.id!r} ({len(plan.claims)} claims) does not fit "
                               f"one transaction: {exc}") from None

    # -- building the txn ----------------------------------------------------------------

    def _compares(self, plan: Plan, ledgers: dict[str, Machine], free: bool = False):
        """Compares (each built without the dataclass ``__init__``), the keys read back in
        order (touched machines, those of ``ledgers``; the job; victim jobs; victim allocs), the
        failure branch's Gets and the claims' alloc keys in claim order.

        Each machine, victim job and victim alloc is compared at its seen mod_revision; the job
        too unless ``free`` (a record-free placement, ``record_free``). Every claimed task's
        alloc key is compared missing (``create_revision == 0``): a task is never placed over an
        allocation the plan did not see (another placement's, written without the record, or a
        dead scheduler's gang reservation). A plan with claims of a job that is not a gang also
        compares its kill marker missing, and its failure branch reads the claimed alloc keys and
        the marker after the compared keys (``guarded``); a gang's does not read them back."""
        keys, compares, gets = [], [], []
        reads = self.keys.machine_reads
        for machine_id in ledgers:
            key, get = reads.get(machine_id) or self.keys.machine_read(machine_id)
            keys.append(key)
            gets.append(get)
            compares.append(_COMPARE(key, _MOD, _EQ, plan.machines[machine_id].mod_revision))
        job_id = plan.job.id
        job_key = self.keys.job(job_id)
        keys.append(job_key)
        if not free:
            compares.append(_COMPARE(job_key, _MOD, _EQ, plan.job.mod_revision))
        for entry in plan.victims.values():
            key = self.keys.job(entry.id)
            keys.append(key)
            compares.append(_COMPARE(key, _MOD, _EQ, entry.mod_revision))
        for (victim_id, task), entry in plan.victim_allocs.items():
            key = self.keys.alloc(victim_id, task)
            keys.append(key)
            compares.append(_COMPARE(key, _MOD, _EQ, entry.mod_revision))
        gets += [_GET(key, False) for key in keys[len(gets):]]
        alloc = self.keys.alloc
        alloc_keys = [alloc(job_id, claim.task_index) for claim in plan.claims]
        compares += [_COMPARE(key, _CREATE, _EQ, 0) for key in alloc_keys]
        if guarded(plan):
            marker = self.keys.kill(job_id)
            compares.append(_COMPARE(marker, _CREATE, _EQ, 0))
            gets += [_GET(key, False) for key in alloc_keys]
            gets.append(_GET(marker, False))
        return compares, keys, gets, alloc_keys

    def _writes(self, plan: Plan, new: dict[str, Machine], compared: list[str], alloc_keys: list[str],
                record: JobRecord | None):
        """Success ops, the {key: value} put, the keys deleted, and the values put as
        objects: (ledgers, job records, {alloc key: Alloc}). Values are built here from the
        plan's decoded entries, so they take the codec's trusted encoders (field checks
        instead of a decode-back; same bytes, same errors). ``compared`` are the keys
        ``_compares`` gave, whose strings the writes of the same keys reuse, ``alloc_keys`` the
        claims' alloc keys, in claim order, and ``record`` the job's new record (``updated_record``;
        put when it differs from the seen one; None: a record-free placement)."""
        claims, ledgers, allocs = self._claim_writes(plan, new, compared, alloc_keys)
        deleted: list[str] = []
        job = plan.job.record
        records = ([record] if record is not None and record != job else []) + list(victim_records(plan).values())
        job_key = compared[len(new)]
        # The records first: a watcher then applies the record with the claimed tasks placed
        # before their allocs, so it never derives them from the allocs only to drop that again.
        written = {job_key if record.id == plan.job.id else self.keys.job(record.id): encode_job_record(record)
                   for record in records}
        written.update(claims)
        for claim in plan.claims:
            if claim.evicts:  # (rare: no generator per claim)
                deleted.extend(self.keys.alloc(job_id, task) for job_id, task in claim.evicts)
        if plan.victim_allocs:
            deleted.extend(self.keys.alloc(job_id, task) for job_id, task in collateral(plan))
        ops = [_PUT(key, value, 0) for key, value in written.items()] + [Delete(key) for key in deleted]
        return ops, written, tuple(deleted), (ledgers, records, allocs)

    @staticmethod
    def _claim_writes(plan: Plan, new: dict[str, Machine], compared: list[str], alloc_keys: list[str]):
        """The packed ledgers and allocs of ``plan``'s claims: ({key: bytes}, [ledger],
        {alloc key: Alloc}), the ledgers under the keys ``_compares`` gave."""
        written: dict[str, bytes] = {}
        ledgers = list(new.values())
        for key, machine in zip(compared, ledgers):  # (new_ledgers checked each id against its key)
            written[key] = pack_machine(machine)
        job = plan.job.record
        allocs: dict[str, Alloc] = {}
        priority, scheduler, now = job.job.priority, plan.scheduler, plan.now
        for claim, key in zip(plan.claims, alloc_keys):
            allocs[key] = alloc = _ALLOC(job.id, claim.task_index, claim.machine_id, claim.request,
                                         priority, scheduler, now, False)
            written[key] = pack_alloc(alloc)
        return written, ledgers, allocs

    @staticmethod
    def _success(revision: int, written: dict[str, bytes], deleted: tuple[str, ...], applied) -> CommitOutcome:
        """The outcome of a committed txn, with what it put as decoded entries at ``revision``."""
        ledgers, records, allocs = applied
        # CommitOutcome(True, revision, written=…, deleted=…, applied_*=…, applied=True), every
        # field given in order (fresh_* and quarantined empty): one per commit, without its dataclass __init__.
        return _COMMIT_OUTCOME(True, revision, {}, None, False, {}, {}, written, deleted,
                               tuple([_MACHINE_ENTRY(m, revision) for m in ledgers]),
                               tuple([_JOB_ENTRY(r, revision) for r in records]), allocs, True, {}, {})

    # -- failure -------------------------------------------------------------------------

    def _failure(self, plan: Plan, revision: int, reads) -> CommitOutcome:
        """Decode the Gets of the failure branch (``_compares``' order). A key still at
        the revision the plan saw holds the value the plan saw (a revision names one write):
        the plan's entry is reused instead of decoding it again (most of a failed txn's keys).
        A value that does not decode or names another id is quarantined: its entry is None
        and ``quarantined`` names its key (see the module docstring). For a ``guarded`` plan
        the claimed alloc keys found are ``fresh_allocs`` and applied to the fresh job (those
        tasks placed), which is killed when the kill marker exists."""
        machine_ids = touched_machines(plan)
        values = [kvs[0] if kvs else None for kvs in reads]
        bad: dict[str, tuple[int, str]] = {}
        fresh_machines = {mid: _fresh(kv, plan.machines[mid], _machine_entry, mid, bad)
                          for mid, kv in zip(machine_ids, values)}
        at = len(machine_ids)
        job_kvs = values[at:at + 1 + len(plan.victims)]
        fresh_job = _fresh(job_kvs[0], plan.job, _job_entry, plan.job.id, bad)
        victims = {victim: _fresh(kv, plan.victims[victim], _job_entry, victim, bad)
                   for victim, kv in zip(plan.victims, job_kvs[1:])}
        at += 1 + len(plan.victims)
        alloc_kvs = values[at:at + len(plan.victim_allocs)]
        allocs = {task: _fresh(kv, plan.victim_allocs[task], _alloc_entry, task, bad)
                  for task, kv in zip(plan.victim_allocs, alloc_kvs)}
        deleted = fresh_job is None and job_kvs[0] is None  # (a quarantined job is unusable, not gone)
        found: dict[tuple[str, int], AllocEntry] = {}
        if guarded(plan):
            at += len(plan.victim_allocs)
            job_id = plan.job.id
            for claim, kv in zip(plan.claims, values[at:at + len(plan.claims)]):
                if kv is not None:
                    task = (job_id, claim.task_index)
                    entry = _fresh(kv, _UNSEEN, _alloc_entry, task, bad)
                    if entry is not None:
                        found[task] = entry
            killed = values[at + len(plan.claims)] is not None
            if fresh_job is not None and (found or killed):
                fresh_job = _placed_by_others(fresh_job, found.values(), killed)
        return _COMMIT_OUTCOME(False, revision, fresh_machines, fresh_job, deleted, victims, allocs, {}, (),
                               (), (), {}, False, bad, found)


def guarded(plan: Plan) -> bool:
    """True for a plan with claims of a job that is not a gang: its claims are guarded per task
    (alloc keys and the kill marker compared missing, read back on failure)."""
    return bool(plan.claims) and not plan.job.record.job.gang


def record_free(plan: Plan, record: JobRecord) -> bool:
    """True when ``plan`` (``guarded``) need not write its job record: ``record``, its
    ``updated_record``, differs from the seen record only in task states (the claimed tasks
    are placed by their allocs alone: ``model.effective_tasks``)."""
    if not guarded(plan):
        return False
    seen = plan.job.record
    return (record.reason == seen.reason and record.first_attempt_at == seen.first_attempt_at
            and record.placed_at == seen.placed_at and record.killed == seen.killed)


def _placed_by_others(entry: JobEntry, found, killed: bool) -> JobEntry:
    """``entry`` (the fresh job) with the tasks of the allocs ``found`` placed and, when the kill
    marker exists, killed (its mod_revision kept: the record's)."""
    record = entry.record
    tasks = record.tasks
    changes = [(e.alloc.task_index, e.alloc.running) for e in found
               if 0 <= e.alloc.task_index < len(tasks) and tasks[e.alloc.task_index] == "p"]
    if changes:
        record = record.with_progress(set_placed(tasks, changes), record.reason, record.first_attempt_at,
                                      record.placed_at)
    if killed and not record.killed:
        record = replace(record, killed=True)
    return entry if record is entry.record else _JOB_ENTRY(record, entry.mod_revision)


class _Unseen:
    mod_revision = -1  # no key has it: a found value is always decoded


_UNSEEN = _Unseen()


def _machine_entry(kv: KeyValue, ident: str) -> tuple[MachineEntry | None, str]:
    machine = decode_machine(kv.key, kv.value)
    if machine.id != ident:
        return None, f"holds machine {machine.id!r}, not {ident!r}"
    return MachineEntry(machine, kv.mod_revision), ""


def _job_entry(kv: KeyValue, ident: str) -> tuple[JobEntry | None, str]:
    record = decode_job_record(kv.key, kv.value)
    if record.id != ident:
        return None, f"holds job {record.id!r}, not {ident!r}"
    return JobEntry(record, kv.mod_revision), ""


def _alloc_entry(kv: KeyValue, ident: tuple[str, int]) -> tuple[AllocEntry | None, str]:
    alloc = decode_alloc(kv.key, kv.value)
    if (alloc.job_id, alloc.task_index) != ident:
        return None, f"holds the alloc of {alloc.job_id}/{alloc.task_index}, not {ident[0]}/{ident[1]}"
    return AllocEntry(alloc, kv.mod_revision), ""


def _fresh(kv: KeyValue | None, seen, decode, ident, bad: dict[str, tuple[int, str]]):
    """The entry of a failure-branch read: ``seen`` if the key is still at its revision, None
    if the key is gone, else ``decode(kv, ident)``'s entry; a value that does not decode or
    names another id than ``ident`` gives None and goes into ``bad`` (key -> (mod, why))."""
    if kv is None:
        return None
    if kv.mod_revision == seen.mod_revision:
        return seen
    try:
        entry, why = decode(kv, ident)
    except CodecError as exc:
        entry, why = None, str(exc)
    if entry is None:
        bad[kv.key] = (kv.mod_revision, why)
    return entry


# -- plan arithmetic (pure) --------------------------------------------------------------


def touched_machines(plan: Plan) -> list[str]:
    """Machine ids the plan's claims use, in first-use order, then those of its ``collateral``
    evictions (``new_ledgers``' order)."""
    ids = dict.fromkeys(claim.machine_id for claim in plan.claims)
    if plan.victim_allocs:
        for task in collateral(plan):
            ids.setdefault(plan.victim_allocs[task].alloc.machine_id)
    return list(ids)


def collateral(plan: Plan) -> list[tuple[str, int]]:
    """The victim allocations no claim evicts: the rest of a gang one of whose members a claim
    evicts, evicted in the same txn (a gang runs whole or not at all, docs/GANGS.md); their
    machines are in ``plan.machines``, compared and released like a claim's."""
    if not plan.victim_allocs:
        return []
    named = {task for claim in plan.claims for task in claim.evicts}
    return [task for task in plan.victim_allocs if task not in named]


def check_plan(plan: Plan) -> None:
    """ValueError naming the job and the problem unless the plan is self-consistent."""
    record = plan.job.record
    seen: set[int] = set()
    evicted: set[tuple[str, int]] = set()
    tasks, states, machines = record.job.tasks, record.tasks, plan.machines
    for claim in plan.claims:
        index = claim.task_index
        if 0 <= index < tasks and index not in seen and states[index] == "p" and claim.machine_id in machines \
                and not claim.evicts:
            seen.add(index)  # the usual claim: checked without naming it
            continue
        where = f"plan of {plan.scheduler!r} for job {record.id!r}: task {index}"
        if not 0 <= index < tasks:
            raise ValueError(f"{where} is out of range (job has {tasks} tasks)")
        if index in seen:
            raise ValueError(f"{where} is claimed twice")
        seen.add(index)
        if states[index] != TaskState.PENDING.value:
            raise ValueError(f"{where} is not pending (state {states[index]!r})")
        if claim.machine_id not in machines:
            raise ValueError(f"{where} is on machine {claim.machine_id!r}, which the plan has no ledger of")
        for job_id, task in claim.evicts:
            _check_victim(plan, job_id, task, where, claim.machine_id)
            if (job_id, task) in evicted:
                raise ValueError(f"{where} evicts {job_id}/{task}, which another claim evicts too")
            evicted.add((job_id, task))
    if len(plan.victim_allocs) > len(evicted):
        for job_id, task in collateral(plan):
            where = f"plan of {plan.scheduler!r} for job {record.id!r}: the rest of gang {job_id!r}"
            victim = plan.victims.get(job_id)
            if victim is None or not victim.record.job.gang:
                raise ValueError(f"{where}: allocation {job_id}/{task} is evicted by no claim and is not of a "
                                 f"gang victim of the plan")
            _check_victim(plan, job_id, task, where, plan.victim_allocs[(job_id, task)].alloc.machine_id)


def _check_victim(plan: Plan, job_id: str, task: int, where: str, machine_id: str) -> None:
    victim = plan.victims.get(job_id)
    if job_id == plan.job.id or victim is None:
        raise ValueError(f"{where} evicts {job_id}/{task}, but the plan carries no victim record "
                         f"of job {job_id!r}")
    if victim.id != job_id:
        raise PlanRejected(f"{where} evicts {job_id}/{task}, but the plan files job {victim.id!r} under {job_id!r}")
    if not 0 <= task < victim.record.job.tasks or victim.record.tasks[task] not in "ar":
        raise ValueError(f"{where} evicts {job_id}/{task}, which is not placed or running")
    seen = plan.victim_allocs.get((job_id, task))
    if seen is None:
        raise ValueError(f"{where} evicts {job_id}/{task}, but the plan carries no allocation of it")
    if seen.alloc.job_id != job_id or seen.alloc.task_index != task:
        raise PlanRejected(f"{where} evicts {job_id}/{task}, but the plan files the alloc of "
                           f"{seen.alloc.job_id}/{seen.alloc.task_index} under it")
    if seen.alloc.machine_id != machine_id:
        raise PlanRejected(f"{where} evicts {job_id}/{task} to make room on {machine_id!r}, but that "
                           f"task runs on {seen.alloc.machine_id!r}")


def new_ledgers(plan: Plan) -> dict[str, Machine]:
    """Each touched machine's ledger after the plan: seen + claims - evicted tasks, written by
    the plan's scheduler."""
    # Sums first, one new Machine per machine at the end: the commit's hot path (building a
    # Machine costs more than the arithmetic).
    totals: dict[str, list] = {}
    for claim in plan.claims:
        entry = totals.get(claim.machine_id)
        if entry is None:
            seen = plan.machines[claim.machine_id].machine
            if seen.id != claim.machine_id:  # the ledger written is the key compared: never another's
                raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r} files machine {seen.id!r} "
                                   f"under {claim.machine_id!r}: its ledger would not be the key compared")
            totals[claim.machine_id] = entry = [seen, seen.allocated, seen.task_count]
        if claim.request.extra:
            problem = binding_problem(claim.request, entry[0].capacity)
            if problem is not None:
                raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r}: task {claim.task_index} on "
                                   f"machine {claim.machine_id!r}: {problem}")
        entry[1] = _plus(entry[1], claim.request)
        entry[2] += 1
        for victim in claim.evicts:
            entry[1] = entry[1] - plan.victim_allocs[victim].alloc.resources
            entry[2] -= 1
    if plan.victim_allocs:
        for task in collateral(plan):  # the rest of an evicted gang, released on its machines
            alloc = plan.victim_allocs[task].alloc
            entry = totals.get(alloc.machine_id)
            if entry is None:
                seen = plan.machines.get(alloc.machine_id)
                if seen is None or seen.machine.id != alloc.machine_id:
                    raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r} evicts "
                                       f"{task[0]}/{task[1]} on machine {alloc.machine_id!r} without its ledger")
                totals[alloc.machine_id] = entry = [seen.machine, seen.machine.allocated, seen.machine.task_count]
            entry[1] = entry[1] - alloc.resources
            entry[2] -= 1
    for mid, (seen, allocated, count) in totals.items():
        _check_ledger(plan, seen, allocated, count)
    writer = plan.scheduler
    return {mid: _MACHINE(seen.id, seen.capacity, seen.zone, seen.rack, seen.platform, seen.packages, seen.labels,
                          seen.state, allocated, count, writer)  # replace(seen, ...), without its cost
            for mid, (seen, allocated, count) in totals.items()}


def _plus(a: Resources, b: Resources) -> Resources:
    """``a + b``; built directly when neither has extra resources (the usual case)."""
    if a.extra or b.extra:
        return a + b
    return _RESOURCES(a.cpu + b.cpu, a.memory + b.memory, a.disk + b.disk, ())


def _check_ledger(plan: Plan, seen: Machine, allocated, count: int) -> None:
    """PlanRejected unless the machine is not down and the new ledger fits it: a plan never
    places on a down machine and never overcommits, whatever its scheduler decided (defence in
    depth behind every scheduler's own checks; a draining machine is the scheduler's policy)."""
    capacity = seen.capacity
    if (seen.state is not _DOWN and count >= 0 and not allocated.extra and not capacity.extra
            and 0 <= allocated.cpu <= capacity.cpu and 0 <= allocated.memory <= capacity.memory
            and 0 <= allocated.disk <= capacity.disk):
        return  # the common case, decided without building names
    if seen.state is _DOWN:
        raise PlanRejected(f"plan of {plan.scheduler!r} for job {plan.job.id!r} places tasks on machine "
                           f"{seen.id!r}, which is {seen.state}")
    short = allocated.shortfall(capacity)
    if short is not None or allocated.is_negative() or count < 0:
        raise PlanRejected(
            f"plan of {plan.scheduler!r} for job {plan.job.id!r} would leave machine {seen.id!r} with "
            f"ledger {allocated.to_dict()} ({count} tasks) against capacity {seen.capacity.to_dict()}")


def updated_record(plan: Plan) -> JobRecord:
    """The plan's job with claimed tasks 'a', the reason for what stays pending, and times."""
    seen = plan.job.record
    tasks = seen.tasks
    if plan.claims:  # (a reason write keeps the task states)
        tasks = with_states(tasks, [claim.task_index for claim in plan.claims], "a")  # TaskState.PLACED
    first = seen.first_attempt_at if seen.first_attempt_at is not None else plan.now
    placed = seen.placed_at
    if placed is None and "p" not in tasks and not seen.killed:  # no pending task left
        placed = plan.now
    reason = summarize_reasons(_still_pending(plan.unplaced, tasks))
    return seen.with_progress(tasks, reason, first, placed)


def _still_pending(unplaced: dict[int, str], tasks: str) -> dict[int, str]:
    """The entries of ``unplaced`` (by task index) whose task is pending in ``tasks``: usually
    all of them (a scheduler reports the pending tasks it could not place, often every one),
    found with C-level loops (``itemgetter`` and ``tuple.count``) before a filtering pass
    over thousands of tasks."""
    if len(unplaced) > 1:
        states = itemgetter(*unplaced)(tasks)
        if states.count("p") == len(states):
            return unplaced
    return {i: r for i, r in unplaced.items() if tasks[i] == "p"}


def victim_records(plan: Plan) -> dict[str, JobRecord]:
    """Victim job records with their evicted tasks back to pending."""
    evicted: dict[str, list[int]] = {}
    for claim in plan.claims:
        for job_id, task in claim.evicts:
            evicted.setdefault(job_id, []).append(task)
    rest = collateral(plan)
    for job_id, task in rest:
        evicted.setdefault(job_id, []).append(task)
    if rest:  # a gang evicted whole says why
        gangs = {job_id for job_id, _ in rest}
        return {job_id: replace(plan.victims[job_id].record.with_tasks(tasks, TaskState.PENDING),
                                reason=f"gang member preempted by job {plan.job.id!r}: the whole gang is evicted")
                if job_id in gangs else plan.victims[job_id].record.with_tasks(tasks, TaskState.PENDING)
                for job_id, tasks in evicted.items()}
    return {job_id: plan.victims[job_id].record.with_tasks(tasks, TaskState.PENDING)
            for job_id, tasks in evicted.items()}


StoreCommitter.plan_rules = (check_plan, new_ledgers, updated_record)
"""The plan arithmetic ``GangCommits`` shares (handed over: it may not import this module)."""
