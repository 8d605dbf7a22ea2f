"""Task state out of the job record (issue 19.2): a placement of a job that is not a gang guards
each task it places (its alloc key and the job's kill marker compared missing) and writes the
record only when its bookkeeping changes; a pending task with an alloc is placed."""

from __future__ import annotations

import pytest
from cell_helpers import seed_machine

from cellstate.check import check_cell
from cellstate.codec.records import decode_job_record, decode_machine, encode_alloc, encode_job_record
from cellstate.codec.kill import KillMarker, decode_kill, encode_kill
from cellstate.committer import StoreCommitter
from cellstate.model import Alloc, Job, JobKind, JobRecord
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.store import CompareTarget
from cellstate.submit import kill_job
from omega.modes import ConflictMode
from cellstate.plan import Claim, JobEntry, MachineEntry, Plan

REQ = Resources(1000, 512)


def seed_job(store, keys, job_id, states, gang=False, **bookkeeping) -> JobEntry:
    record = JobRecord(Job(job_id, JobKind.BATCH, len(states), REQ, gang=gang), states, submitted_at=1.0,
                       **bookkeeping)
    return JobEntry(record, store.put(keys.job(job_id), encode_job_record(record)))


class Recording:
    """Delegates to a store and keeps every txn's compares and success ops."""

    def __init__(self, store):
        self._store, self.txns = store, []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def txn(self, compares, success, failure=()):
        self.txns.append((list(compares), list(success)))
        return self._store.txn(compares, success, failure)


def _started(store, keys, states="ppp"):
    """A job whose first attempt is recorded (so a placement of some of its tasks changes no
    bookkeeping) and two machines."""
    machines = {m: seed_machine(store, keys, m) for m in ("m1", "m2")}
    return seed_job(store, keys, "j", states, first_attempt_at=2.0), machines


def test_a_record_free_placement_writes_no_job_key_and_guards_each_task(store, keys):
    job, machines = _started(store, keys)
    recording = Recording(store)
    plan = Plan(job, (Claim(0, "m1", REQ), Claim(1, "m2", REQ)), machines, "s", now=5.0)
    outcome = StoreCommitter(recording, keys).commit(plan)
    assert outcome.committed and outcome.applied_jobs == ()
    compares, success = recording.txns[-1]
    assert keys.job("j") not in {op.key for op in success} and keys.job("j") not in outcome.written
    assert {(c.key, c.target) for c in compares} == {
        (keys.machine("m1"), CompareTarget.MOD), (keys.machine("m2"), CompareTarget.MOD),
        (keys.alloc("j", 0), CompareTarget.CREATE), (keys.alloc("j", 1), CompareTarget.CREATE),
        (keys.kill("j"), CompareTarget.CREATE)}
    assert all(c.value == 0 for c in compares if c.target is CompareTarget.CREATE)
    kv = store.get(keys.job("j"))
    assert kv.mod_revision == job.mod_revision and decode_job_record(kv.key, kv.value).tasks == "ppp"
    view = ReplicaView(store, keys)
    assert view.job("j").record.tasks == "aap" and view.job("j").mod_revision == job.mod_revision
    assert check_cell(store, keys).ok


def test_bookkeeping_changes_still_write_the_record(store, keys):
    """The first attempt (first_attempt_at), the last pending task (placed_at) and a new reason
    write the record, with the per-task compares besides the job's revision."""
    machines = {"m1": seed_machine(store, keys, "m1")}
    job = seed_job(store, keys, "j", "pp")
    recording = Recording(store)
    committer = StoreCommitter(recording, keys)
    first = committer.commit(Plan(job, (Claim(0, "m1", REQ),), machines, "s", unplaced={1: "no room"}, now=3.0))
    assert first.committed and [e.record.tasks for e in first.applied_jobs] == ["ap"]
    compares, _ = recording.txns[-1]
    assert (keys.job("j"), CompareTarget.MOD) in {(c.key, c.target) for c in compares}
    assert (keys.alloc("j", 0), CompareTarget.CREATE) in {(c.key, c.target) for c in compares}
    view = ReplicaView(store, keys)
    last = committer.commit(Plan(view.job("j"), (Claim(1, "m1", REQ),), {"m1": view.machine("m1")}, "s", now=4.0))
    record = last.applied_jobs[0].record
    assert (record.tasks, record.placed_at, record.reason) == ("aa", 4.0, "")


def test_a_placement_after_a_kill_marker_fails_and_writes_nothing(store, keys):
    job, machines = _started(store, keys)
    store.put(keys.kill("j"), encode_kill(KillMarker("j", 9.0)))
    before = store.revision()
    outcome = StoreCommitter(store, keys).commit(Plan(job, (Claim(0, "m1", REQ),), machines, "s", now=5.0))
    assert not outcome.committed and store.revision() == before
    assert store.get(keys.alloc("j", 0)) is None
    assert outcome.fresh_job.record.killed  # the split drops every claim: nothing is retried
    assert outcome.fresh_job.mod_revision == job.mod_revision


def test_kill_puts_its_marker_first_and_no_placement_lands_after_it(store, keys):
    job, machines = _started(store, keys)
    kill_job(store, keys, "j", now=7.0)
    assert decode_kill(keys.kill("j"), store.get(keys.kill("j")).value) == KillMarker("j", 7.0)
    outcome = StoreCommitter(store, keys).commit(Plan(job, (Claim(0, "m1", REQ),), machines, "s", now=8.0))
    assert not outcome.committed and store.get(keys.alloc("j", 0)) is None
    assert check_cell(store, keys).ok


def test_kill_releases_tasks_placed_without_the_record(store, keys):
    job, machines = _started(store, keys)
    assert StoreCommitter(store, keys).commit(Plan(job, (Claim(1, "m1", REQ),), machines, "s", now=5.0)).committed
    released = []
    kill_job(store, keys, "j", released=released)
    assert [a.task_index for a in released] == [1]
    record = decode_job_record(keys.job("j"), store.get(keys.job("j")).value)
    assert record.killed and record.tasks == "kkk"
    assert check_cell(store, keys).ok


class PlacingFirst:
    """Delegates to a store and counts its ranges (the kill's reads of a job's allocs); with
    ``plan``, commits it (another scheduler's placement, written without the record) just
    before the first txn (the kill's marker)."""

    def __init__(self, store, keys, plan: Plan | None = None):
        self._store, self._keys, self._plan = store, keys, plan
        self.placed, self.ranges = False, 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def range(self, prefix, revision=None):
        self.ranges += 1
        return self._store.range(prefix, revision)

    def txn(self, compares, success, failure=()):
        if self._plan is not None and not self.placed:
            self.placed = StoreCommitter(self._store, self._keys).commit(self._plan).committed
        return self._store.txn(compares, success, failure)


def test_kill_reads_again_only_when_something_was_written_before_its_marker(store, keys):
    """Nothing written between the kill's read and its marker: that read is current and the
    kill goes on with it. A placement landing in between (its alloc missed by the read) is
    found by reading again, and released too."""
    def stored(*machine_ids):
        return {m: MachineEntry(decode_machine(kv.key, kv.value), kv.mod_revision)
                for m in machine_ids for kv in [store.get(keys.machine(m))]}

    job, machines = _started(store, keys, "pppp")
    assert StoreCommitter(store, keys).commit(Plan(job, (Claim(1, "m1", REQ),), machines, "s", now=5.0)).committed
    quiet, released = PlacingFirst(store, keys), []
    kill_job(quiet, keys, "j", released=released)
    assert quiet.ranges == 1 and [a.task_index for a in released] == [1]

    job = seed_job(store, keys, "j2", "pppp", first_attempt_at=2.0)
    assert StoreCommitter(store, keys).commit(Plan(job, (Claim(1, "m1", REQ),), stored("m1"), "s", now=5.0)).committed
    racing = PlacingFirst(store, keys, Plan(job, (Claim(2, "m2", REQ),), stored("m2"), "t", now=6.0))
    released = []
    kill_job(racing, keys, "j2", released=released)
    assert racing.placed and racing.ranges == 2 and sorted(a.task_index for a in released) == [1, 2]
    record = decode_job_record(keys.job("j2"), store.get(keys.job("j2")).value)
    assert record.killed and record.tasks == "kkkk" and store.get(keys.alloc("j2", 2)) is None
    assert check_cell(store, keys).ok


def test_a_task_placed_by_another_writer_fails_the_alloc_compare(store, keys):
    """Another writer placed task 1 meanwhile (its alloc, no record): the txn fails on that
    alloc key; the outcome carries the alloc and a fresh job with task 1 placed, so the split
    drops that claim and keeps the other."""
    job, machines = _started(store, keys)
    other = StoreCommitter(store, keys).commit(Plan(job, (Claim(1, "m2", REQ),), machines, "other", now=4.0))
    assert other.committed
    plan = Plan(job, (Claim(0, "m1", REQ), Claim(1, "m1", REQ)), {"m1": machines["m1"]}, "s", now=5.0)
    outcome = StoreCommitter(store, keys).commit(plan)
    assert not outcome.committed
    assert set(outcome.fresh_allocs) == {("j", 1)} and outcome.fresh_allocs[("j", 1)].alloc.scheduler == "other"
    assert outcome.fresh_job.record.tasks == "pap"
    split = ConflictMode.RESOURCE_FIT.strategy.split(plan, outcome)
    assert [c.task_index for c in split.kept] == [0] and [c.task_index for c in split.dropped] == [1]
    assert not ConflictMode.RESOURCE_FIT.strategy.stale(plan, outcome, split)
    view = ReplicaView(store, keys)
    view.apply_outcome(outcome)
    assert view.job("j").record.tasks == "pap"


def test_gang_plans_keep_writing_the_record(store, keys):
    machines = {"m1": seed_machine(store, keys, "m1")}
    job = seed_job(store, keys, "g", "pp", gang=True, first_attempt_at=1.0)
    recording = Recording(store)
    outcome = StoreCommitter(recording, keys).commit(
        Plan(job, (Claim(0, "m1", REQ), Claim(1, "m1", REQ)), machines, "s", now=2.0))
    assert outcome.committed and outcome.applied_jobs[0].record.tasks == "aa"
    compares, _ = recording.txns[-1]
    assert keys.kill("g") not in {c.key for c in compares}


def test_check_is_clean_with_derived_placements_and_reports_a_marker_on_a_live_job(store, keys):
    job, machines = _started(store, keys, "pppp")
    committer = StoreCommitter(store, keys)
    assert committer.commit(Plan(job, (Claim(0, "m1", REQ), Claim(2, "m2", REQ)), machines, "s", now=3.0)).committed
    report = check_cell(store, keys)
    assert report.ok, report.violations
    store.put(keys.kill("j"), encode_kill(KillMarker("j", 4.0)))
    store.put(keys.kill("ghost"), encode_kill(KillMarker("ghost", 4.0)))
    store.put(keys.kill("bad"), b"\xc1")
    report = check_cell(store, keys)
    assert {(v.kind, v.key) for v in report.violations} == {
        ("kill-marker", keys.kill("j")), ("kill-marker", keys.kill("ghost")), ("undecodable", keys.kill("bad"))}


def test_check_still_reports_a_live_task_without_alloc_and_a_gang_reservation(store, keys):
    seed_machine(store, keys, "m1")
    seed_job(store, keys, "j", "ap")
    seed_job(store, keys, "g", "pp", gang=True)
    store.put(keys.alloc("g", 0), encode_alloc(Alloc("g", 0, "m1", REQ)))
    kinds = {(v.kind, v.key) for v in check_cell(store, keys).violations}
    assert ("task-state", keys.job("j")) in kinds and ("orphaned-reservation", keys.job("g")) in kinds


@pytest.mark.parametrize("running", [False, True])
def test_the_rule(running):
    record = JobRecord(Job("j", JobKind.BATCH, 4, REQ), "pafp")
    allocs = [Alloc("j", i, "m", REQ, running=running) for i in (0, 1, 3)]
    assert record.with_allocs(allocs).tasks == ("rafr" if running else "aafa")
    gang = JobRecord(Job("g", JobKind.BATCH, 2, REQ, gang=True), "pp")
    assert gang.with_allocs([Alloc("g", 0, "m", REQ)]) is gang
    assert record.with_allocs([]) is record
