"""``GangCommits``: an all-or-nothing job larger than one transaction, reserved in chunks and
placed by one last txn (docs/CELLSTATE.md, "Gangs larger than one transaction").

    begin    grant a lease (``ttl`` s); compare gangs/{job} missing; put it with the lease.
    reserve  (one chunk) compare every touched machine's mod_revision, the job's mod_revision and
             the gang key's create_revision (the one ``begin`` made: a lease that expired, or a
             kill that deleted the key, fails the chunk); put the charged ledgers, the allocs
             (not leased) and the gang record (reserved count, with the lease). The job record is
             NOT written: the tasks stay 'p', so nothing is placed and no agent starts them.
    finish   compare the job's mod_revision and the gang key's create_revision; put the job record
             with every gang task 'a' (one put whatever the size) and delete the gang key. Only
             now is the gang placed, all at once.
    release  under a hold: delete the allocs of the job's tasks that are not placed or running
             (reservations, ours or an orphaned one's) and take them off their ledgers, in txns of
             whole machines within the op limit, each comparing the gang key's create_revision,
             every alloc's and machine's mod_revision.
    end      revoke the lease (the gang key, if still there, goes with it).

A chunk needs one put per machine and per alloc plus the gang record: the claims per txn of a
placement (``claims_per_txn``). Evicting claims are not supported here (the placer refuses them).
"""

from __future__ import annotations

from dataclasses import replace

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.codec.fields import CodecError
from cellstate.codec.gang import GangRecord, encode_gang
from cellstate.codec.trusted import pack_machine
from cellstate.keys import CellKeys
from cellstate.lifecycle_txn import released
from cellstate.model import TaskState
from cellstate.store import (
    Compare, CompareOp, CompareTarget, Delete, Get, Put, Store, StoreError, Unavailable, missing,
    mod_revision_is,
)
from cellstate.plan import CommitOutcome, GangHold, JobEntry, MachineEntry, Plan, PlanTooLarge
from cellstate.plan_rules import check_plan, new_ledgers, updated_record

GANG_LEASE_TTL = 5
"""Seconds a reservation outlives its scheduler, at least (refreshed before every chunk; the
placer asks for the expected decision time on top, ``omega.gangs.lease_ttl``)."""
_RELEASE_ATTEMPTS = 20
_LIVE = (TaskState.PLACED.value, TaskState.RUNNING.value)


def _created_at(key: str, revision: int) -> Compare:
    return Compare(key, CompareTarget.CREATE, CompareOp.EQ, revision)


class GangCommits:
    """The gang transactions of ``committer`` (a ``StoreCommitter``): omega's ``GangCommitter``.
    A chunk is built and sent through the committer's public txn API (``txn_compares``,
    ``claim_writes``, ``send``, ``failure_outcome``); the plan arithmetic is ``cellstate.plan_rules``."""

    def __init__(self, committer, ttl: int = GANG_LEASE_TTL):
        self.committer = committer
        self.store: Store = committer.store
        self.keys: CellKeys = committer.keys
        self.max_txn_ops: int = committer.max_txn_ops
        self.max_claims_per_txn: int = committer.max_claims_per_txn
        self.ttl = ttl

    # -- holding the job ---------------------------------------------------------------------

    def begin(self, job: JobEntry, scheduler: str, now: float, ttl: int | None = None) -> GangHold | None:
        """Create the job's gang key on a new lease of ``ttl`` s (at least ``self.ttl``: the caller
        sizes it to cover its decision); None (lease revoked) when the key exists."""
        key = self.keys.gang(job.id)
        value = encode_gang(GangRecord(job.id, scheduler, 0, float(now)))
        seconds = self.ttl if ttl is None else max(self.ttl, int(ttl))
        lease = self.store.grant_lease(seconds)
        try:
            result = self.store.txn([missing(key)], [Put(key, value, lease)], [])
        except BaseException:
            self._revoke(lease)
            raise
        if not result.succeeded:
            self._revoke(lease)
            return None
        return GangHold(job.id, scheduler, lease, result.revision, float(now), ttl=seconds)

    def keep_alive(self, hold: GangHold) -> bool:
        """Refresh the hold's lease; False when it is gone (expired or revoked). Outages raise."""
        try:
            self.store.refresh_lease(hold.lease)
        except Unavailable:
            raise
        except StoreError:
            return False
        return True

    def end(self, hold: GangHold) -> None:
        """Revoke the hold's lease (its gang key, if still there, is deleted with it)."""
        self._revoke(hold.lease)

    def _revoke(self, lease: int) -> None:
        try:
            self.store.revoke_lease(lease)
        except Unavailable:
            raise
        except StoreError:  # expired already: nothing is attached any more
            pass

    # -- one chunk ---------------------------------------------------------------------------

    def reserve(self, hold: GangHold, plan: Plan) -> tuple[CommitOutcome, bool]:
        """Commit ``plan``'s claims as reservations (see the module docstring). Returns the
        outcome (as ``StoreCommitter.commit``'s: fresh machines and job on failure) and whether
        the hold is lost (the gang key is gone or another's)."""
        if plan.victims or any(c.evicts for c in plan.claims):
            raise PlanTooLarge(f"gang job {plan.job.id!r}: a reservation in chunks cannot evict tasks")
        check_plan(plan)
        ledgers = new_ledgers(plan)
        committer = self.committer
        compares, keys, gets, alloc_keys = committer.txn_compares(plan, ledgers)
        gang_key = self.keys.gang(hold.job_id)
        compares.append(_created_at(gang_key, hold.create_revision))
        gets.append(Get(gang_key))
        written, _, allocs = committer.claim_writes(plan, ledgers, keys, alloc_keys)
        record = GangRecord(hold.job_id, hold.scheduler, hold.reserved + len(plan.claims), hold.started_at)
        success = [Put(key, value) for key, value in written.items()]
        success.append(Put(gang_key, encode_gang(record), hold.lease))
        result = committer.send("gang chunk", plan, compares, success, gets)
        if result.succeeded:
            hold.reserved = record.reserved
            revision = result.revision
            return CommitOutcome(True, revision, written=written,
                                 applied_machines=tuple(MachineEntry(m, revision) for m in ledgers.values()),
                                 applied_allocs=allocs, applied=True), False
        gang_reads = result.reads[-1]
        lost = not gang_reads or gang_reads[0].create_revision != hold.create_revision
        return committer.failure_outcome(plan, result.revision, result.reads[:-1]), lost

    # -- making it final -----------------------------------------------------------------------

    def finish(self, hold: GangHold, plan: Plan) -> CommitOutcome:
        """Put the job record with every claimed task 'a' and delete the gang key, if the job and
        the hold are unchanged; then the lease is revoked. ``plan.claims`` are the reserved claims
        (their machines are not compared: their ledgers already hold them)."""
        record = updated_record(plan)
        job_key, gang_key = self.keys.job(plan.job.id), self.keys.gang(hold.job_id)
        value = encode_job_record(record)
        result = self.store.txn([mod_revision_is(job_key, plan.job.mod_revision),
                                 _created_at(gang_key, hold.create_revision)],
                                [Put(job_key, value), Delete(gang_key)], [Get(job_key)])
        if not result.succeeded:
            kvs = result.reads[0]
            fresh = None
            if kvs:
                try:
                    fresh_record = decode_job_record(kvs[0].key, kvs[0].value)
                    fresh = JobEntry(fresh_record, kvs[0].mod_revision) if fresh_record.id == plan.job.id else None
                except CodecError:
                    fresh = None
            return CommitOutcome(False, result.revision, fresh_job=fresh, job_deleted=not kvs)
        self.end(hold)
        self.committer.gang_placed(plan)
        revision = result.revision
        return CommitOutcome(True, revision, written={job_key: value}, deleted=(gang_key,),
                             applied_jobs=(JobEntry(record, revision),), applied=True)

    # -- evicting a whole gang ---------------------------------------------------------------------

    def evict(self, job_id: str, reason: str, writer: str) -> list[CommitOutcome]:
        """Evict every placed or running task of gang ``job_id`` (``evict_gang``), telling the
        committer (``gang_evicted``: a replay releases its usage); the txns' outcomes, for the view."""
        outcomes, evicted = evict_gang(self.store, self.keys, job_id, reason, writer, self.max_txn_ops)
        if evicted:
            self.committer.gang_evicted(evicted)
        return outcomes

    # -- releasing -------------------------------------------------------------------------------

    def release(self, hold: GangHold) -> list[CommitOutcome]:
        """Delete the allocs of the job's tasks that are not placed or running, and take them off
        their ledgers, under ``hold`` (see the module docstring); stops early when the hold is
        lost (whoever holds the job then releases). The committed txns' outcomes, for the view."""
        outcomes: list[CommitOutcome] = []
        gang_key = self.keys.gang(hold.job_id)
        failures = 0
        while failures < _RELEASE_ATTEMPTS:
            groups = self._releasable(hold.job_id)
            if not groups:
                return outcomes
            compares = [_created_at(gang_key, hold.create_revision)]
            success: list = []
            ledgers, deleted = [], []
            for (machine_key, machine_kv, machine), allocs in groups:
                # compares: the gang key, one per alloc, one per machine (>= the success ops)
                if len(compares) + len(allocs) + 1 > self.max_txn_ops:
                    if success:
                        break
                    allocs = allocs[:max(1, self.max_txn_ops - len(compares) - 1)]
                for key, alloc_kv, _ in allocs:
                    compares.append(mod_revision_is(key, alloc_kv.mod_revision))
                    success.append(Delete(key))
                    deleted.append(key)
                compares.append(mod_revision_is(machine_key, machine_kv.mod_revision if machine_kv else 0))
                if machine is not None:
                    ledger = replace(released(machine, [alloc for _, _, alloc in allocs]), writer=hold.scheduler)
                    success.append(Put(machine_key, pack_machine(ledger)))
                    ledgers.append(ledger)
            result = self.store.txn(compares, success, [Get(gang_key)])
            if not result.succeeded:
                kvs = result.reads[0]
                if not kvs or kvs[0].create_revision != hold.create_revision:
                    return outcomes  # the hold is lost
                failures += 1
                continue
            revision = result.revision
            outcomes.append(CommitOutcome(True, revision, deleted=tuple(deleted),
                                          applied_machines=tuple(MachineEntry(m, revision) for m in ledgers),
                                          applied=True))
        raise StoreError(f"releasing the gang reservation of job {hold.job_id!r} lost {failures} races in a row")

    def _releasable(self, job_id: str) -> list:
        """[((machine key, kv | None, Machine | None), [(alloc key, kv, Alloc)])] of the job's
        allocs whose task is not placed or running, by machine. Values that do not decode are
        left alone (quarantined: ``omega check`` names them)."""
        job_kv = self.store.get(self.keys.job(job_id))
        states = ""
        if job_kv is not None:
            try:
                states = decode_job_record(job_kv.key, job_kv.value).tasks
            except CodecError:
                return []
        by_machine: dict[str, list] = {}
        for kv in self.store.range(self.keys.job_allocs(job_id)).kvs:
            try:
                alloc = decode_alloc(kv.key, kv.value)
            except CodecError:
                continue
            if alloc.job_id != job_id or (0 <= alloc.task_index < len(states) and states[alloc.task_index] in _LIVE):
                continue
            by_machine.setdefault(self.keys.machine(alloc.machine_id), []).append((kv.key, kv, alloc))
        if not by_machine:
            return []
        _, present = self.store.get_many(sorted(by_machine))
        groups = []
        for machine_key in sorted(by_machine):
            kv = present.get(machine_key)
            machine = None
            if kv is not None:
                try:
                    machine = decode_machine(kv.key, kv.value)
                except CodecError:
                    continue
            groups.append(((machine_key, kv, machine), by_machine[machine_key]))
        return groups


def evict_gang(store: Store, keys: CellKeys, job_id: str, reason: str, writer: str,
               max_txn_ops: int) -> tuple[list[CommitOutcome], list]:
    """A gang (``Job.gang``) runs whole or not at all: evict each of its tasks still placed or
    running, back to pending with ``reason``, when some other task of it is pending (a member was
    evicted: preemption, a machine failure). Each txn compares the job's mod_revision (every change
    of its allocs writes the record) and the mod_revision of each machine it releases; it deletes
    the allocs, puts the released ledgers (``writer``) and the record; a gang whose live members do
    not fit one txn takes several (the record is rewritten by each). A killed job, a job that is not
    a gang or not partly pending is left alone. Returns the committed txns' outcomes and the allocs
    evicted; a race (another writer of the job or a machine) is retried on fresh reads, at most
    ``_RELEASE_ATTEMPTS`` times in a row (then StoreError)."""
    outcomes: list[CommitOutcome] = []
    evicted: list = []
    job_key = keys.job(job_id)
    failures = 0
    while failures < _RELEASE_ATTEMPTS:
        job_kv = store.get(job_key)
        if job_kv is None:
            return outcomes, evicted
        try:
            record = decode_job_record(job_kv.key, job_kv.value)
        except CodecError:  # quarantined: ``omega check`` names it
            return outcomes, evicted
        tasks = record.tasks
        if not record.job.gang or record.killed or "p" not in tasks or not any(c in tasks for c in _LIVE):
            return outcomes, evicted
        by_machine: dict[str, list] = {}
        for kv in store.range(keys.job_allocs(job_id)).kvs:
            try:
                alloc = decode_alloc(kv.key, kv.value)
            except CodecError:  # left alone, as ``release`` does
                continue
            if alloc.job_id == job_id and 0 <= alloc.task_index < len(tasks) and tasks[alloc.task_index] in _LIVE:
                by_machine.setdefault(alloc.machine_id, []).append(alloc)
        _, machine_kvs = store.get_many(sorted(keys.machine(m) for m in by_machine))
        compares = [mod_revision_is(job_key, job_kv.mod_revision)]
        success: list = []
        taken, ledgers, deleted = [], [], []
        for machine_id in sorted(by_machine):
            allocs = by_machine[machine_id]
            room = max_txn_ops - 2 - len(success)  # the record's put, the machine's put
            if room < 1:
                break
            allocs = allocs[:room]
            machine_key = keys.machine(machine_id)
            kv = machine_kvs.get(machine_key)
            compares.append(mod_revision_is(machine_key, kv.mod_revision if kv is not None else 0))
            if kv is not None:
                ledger = replace(released(decode_machine(kv.key, kv.value), allocs), writer=writer)
                success.append(Put(machine_key, pack_machine(ledger)))
                ledgers.append(ledger)
            for alloc in allocs:
                key = keys.alloc(job_id, alloc.task_index)
                success.append(Delete(key))
                deleted.append(key)
            taken += allocs
        if not taken:  # live tasks without allocs: nothing here to evict (``omega check`` names them)
            return outcomes, evicted
        back = replace(record.with_tasks([a.task_index for a in taken], TaskState.PENDING), reason=reason)
        value = encode_job_record(back)
        success.append(Put(job_key, value))
        result = store.txn(compares, success, [])
        if not result.succeeded:
            failures += 1
            continue
        failures = 0
        revision = result.revision
        evicted += taken
        outcomes.append(CommitOutcome(True, revision, written={job_key: value}, deleted=tuple(deleted),
                                      applied_machines=tuple(MachineEntry(m, revision) for m in ledgers),
                                      applied_jobs=(JobEntry(back, revision),), applied=True))
    raise StoreError(f"evicting the rest of gang job {job_id!r} lost {failures} races in a row")
