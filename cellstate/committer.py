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

from dataclasses import replace

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.codec.fields import CodecError
from cellstate.codec.trusted import pack_alloc, pack_machine
from cellstate.fastbuild import builder
from cellstate.gang_commit import GangCommits
from cellstate.keys import CellKeys
from cellstate.model import Alloc, JobRecord, Machine, set_placed
from cellstate.store import (
    Compare, CompareOp, CompareTarget, Delete, Get, KeyValue, Put, Store, TxnResult, TxnTooLarge,
)
from cellstate.plan import AllocEntry, CommitOutcome, JobEntry, MachineEntry, Plan, PlanTooLarge
from cellstate.plan_rules import (  # noqa: F401 (the plan arithmetic, named here as before)
    MAX_REASON_CHARS, _still_pending, check_plan, collateral, guarded, new_ledgers, record_free,
    summarize_reasons, touched_machines, updated_record, victim_records,
)

_ALLOC, _MACHINE_ENTRY = builder(Alloc), builder(MachineEntry)
_JOB_ENTRY, _COMMIT_OUTCOME = builder(JobEntry), builder(CommitOutcome)
# Txn ops by the hundred per commit: built without their dataclass __init__ (cellstate.fastbuild).
_PUT, _GET, _COMPARE = builder(Put), builder(Get), builder(Compare)
_MOD, _CREATE, _EQ = CompareTarget.MOD, CompareTarget.CREATE, CompareOp.EQ


def claims_per_txn(max_txn_ops: int) -> int:
    """Claims one txn can hold without evictions: each claim compares its alloc key missing and
    puts the alloc and (at worst) a machine it compares, and the job record and the kill marker
    take one more compare (the record one more put, the marker one more read)."""
    if type(max_txn_ops) is not int or max_txn_ops < 4:
        raise ValueError(f"max_txn_ops must be an int >= 4 to hold one claim, got {max_txn_ops!r}")
    return (max_txn_ops - 2) // 2


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
        compares, keys, gets, alloc_keys = self.txn_compares(plan, ledgers, free)
        success, written, deleted, applied = self._writes(plan, ledgers, keys, alloc_keys,
                                                          None if free else record)
        result = self.send("plan", plan, compares, success, gets)
        if result.succeeded:
            return self._success(result.revision, written, deleted, applied)
        return self.failure_outcome(plan, result.revision, result.reads)

    def send(self, what: str, plan: Plan, compares: list, success: list, gets: list) -> TxnResult:
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

    # -- building the txn (public: ``GangCommits`` builds its chunks from them) -------------

    def txn_compares(self, plan: Plan, ledgers: dict[str, Machine], free: bool = False):
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
        ``txn_compares`` gave, whose strings the writes of the same keys reuse, ``alloc_keys`` the
        claims' alloc keys, in claim order, and ``record`` the job's new record (``updated_record``;
        put when it differs from the seen one; None: a record-free placement)."""
        claims, ledgers, allocs = self.claim_writes(plan, new, compared, alloc_keys)
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
    def claim_writes(plan: Plan, new: dict[str, Machine], compared: list[str], alloc_keys: list[str]):
        """The packed ledgers and allocs of ``plan``'s claims: ({key: bytes}, [ledger],
        {alloc key: Alloc}), the ledgers under the keys ``txn_compares`` gave."""
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

    def failure_outcome(self, plan: Plan, revision: int, reads) -> CommitOutcome:
        """Decode the Gets of the failure branch (``txn_compares``' order). A key still at
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
