"""The optimistic loop against real stores: Omega's two-private-copies test vector over
ConflictMode x CommitMode, job-revision races, plan splitting, gang refusal, retries."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from cellstate.check import check_cell
from cellstate.codec.records import decode_machine, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Job, JobKind, JobRecord, MachineState
from cellstate.resources import Resources
from cellstate.submit import kill_job
from fakeview import (
    FakeClock, MeddlingCommitter, RecordingDecide, ReplicaView, batch_job, least_loaded, machine, seed,
)
from omega.attempts import AttemptOutcome as O
from omega.modes import CommitMode, ConflictMode
from omega.occ import OptimisticPlacer
from cellstate.plan import Claim, PlanTooLarge
from omega.protocols import Decision
from omega.retry import RetryPolicy

SEQ, FIT = ConflictMode.SEQUENCE, ConflictMode.RESOURCE_FIT
INC, AON = CommitMode.INCREMENTAL, CommitMode.ALL_OR_NOTHING


@pytest.fixture(params=["memory", "etcd"])
def cell(request):
    """(store, keys) on the memory store or the session etcd."""
    if request.param == "memory":
        return MemoryStore(), CellKeys("occ")
    return request.getfixturevalue("etcd_store"), request.getfixturevalue("cell_keys")


def placer(store, keys, conflict=SEQ, commit=INC, name="s", retry=None, clock=None, committer=None,
           attempts=None):
    return OptimisticPlacer(name, committer or StoreCommitter(store, keys), conflict, commit,
                            retry or RetryPolicy(max_attempts=4), clock or FakeClock(),
                            on_attempt=None if attempts is None else attempts.append)


def assert_consistent(store, keys):
    report = check_cell(store, keys)
    assert report.ok, report.violations


# Omega's vector: two schedulers decide on private copies at the same revision. "rival" puts
# job A (1 task) on m1; "us" spread job B's two tasks over m1 and m2 on the stale copy.
# room: whether m1 can hold A's task and B's task together. Our first txn fails either way
# (etcd compares revisions); in resource-fit mode with room it is a stale retry, not a conflict.
VECTOR = [
    # conflict, commit, room, outcomes of our attempts, task lists decided, stale retries
    (SEQ, INC, True, [O.PARTIAL, O.COMMITTED], [[0, 1], [0]], 0),
    (SEQ, INC, False, [O.PARTIAL, O.COMMITTED], [[0, 1], [0]], 0),
    (SEQ, AON, True, [O.CONFLICT, O.COMMITTED], [[0, 1], [0, 1]], 0),
    (SEQ, AON, False, [O.CONFLICT, O.COMMITTED], [[0, 1], [0, 1]], 0),
    (FIT, INC, True, [O.COMMITTED], [[0, 1]], 1),
    (FIT, INC, False, [O.PARTIAL, O.COMMITTED], [[0, 1], [0]], 0),
    (FIT, AON, True, [O.COMMITTED], [[0, 1]], 1),
    (FIT, AON, False, [O.CONFLICT, O.COMMITTED], [[0, 1], [0, 1]], 0),
]


@pytest.mark.parametrize("conflict, commit, room, outcomes, decided, stale", VECTOR,
                         ids=[f"{c.value.label}-{m.value.label}-{'room' if r else 'full'}"
                              for c, m, r, _, _, _ in VECTOR])
def test_two_private_copies_claim_the_same_machine(cell, conflict, commit, room, outcomes, decided, stale):
    store, keys = cell
    seed(store, keys, [machine("m1"), machine("m2")],
         [batch_job("A", 1, cpu=2000 if room else 3500), batch_job("B", 2, cpu=1000)])
    rival_view, our_view = ReplicaView(store, keys), ReplicaView(store, keys)
    assert rival_view.revision == our_view.revision
    rival = placer(store, keys, conflict, commit, name="rival").place("A", rival_view, least_loaded)
    assert [a.outcome for a in rival.attempts] == [O.COMMITTED] and rival.placed[0].machine_id == "m1"

    attempts, decide = [], RecordingDecide()
    ours = placer(store, keys, conflict, commit, name="us", attempts=attempts).place("B", our_view, decide)
    assert [a.outcome for a in attempts] == outcomes
    assert decide.calls == decided
    first = attempts[0]
    assert first.failed_transactions == 1 and first.stale_retries == stale and first.retries == 0
    assert first.conflicted == (not stale) and first.conflict_transactions == 1 - stale
    conflict_on_m1 = () if stale else ("m1",)
    assert first.conflicting_machines == conflict_on_m1 and first.winners == (() if stale else ("rival",))
    assert ours.pending == () and sorted(c.task_index for c in ours.placed) == [0, 1]
    assert our_view.job("B").record.tasks == "aa"
    assert_consistent(store, keys)


@pytest.mark.parametrize("conflict, commit", [(SEQ, INC), (SEQ, AON), (FIT, INC), (FIT, AON)],
                         ids=["sequence-incremental", "sequence-gang", "fit-incremental", "fit-gang"])
def test_two_placers_of_one_job_never_place_a_task_twice(cell, conflict, commit):
    store, keys = cell
    seed(store, keys, [machine(f"m{i}") for i in range(4)], [batch_job("J", 3)])
    first_view, second_view = ReplicaView(store, keys), ReplicaView(store, keys)
    first = placer(store, keys, conflict, commit, name="one").place("J", first_view, least_loaded)
    attempts = []
    second = placer(store, keys, conflict, commit, name="two", attempts=attempts).place(
        "J", second_view, least_loaded)
    assert len(first.placed) == 3 and second.placed == ()
    assert [a.outcome for a in attempts] == [O.CONFLICT] and attempts[0].failed_transactions == 1
    assert second_view.job("J").record.tasks == "aaa"
    while second_view.revision < store.revision():  # allocs arrive by the watch
        second_view.replica.pump(0.5)
    assert len(list(second_view.allocs_of("J"))) == 3
    assert_consistent(store, keys)


@pytest.mark.parametrize("backend", ["memory", "etcd"], ids=["memory", "etcd"])
def test_incremental_plan_larger_than_one_txn_is_split(request, backend):
    if backend == "memory":
        store, keys = MemoryStore(max_txn_ops=20), CellKeys("split")
        committer = StoreCommitter(store, keys)
    else:
        store, keys = request.getfixturevalue("etcd_store"), request.getfixturevalue("cell_keys")
        committer = StoreCommitter(store, keys, max_txn_ops=20)
    assert committer.max_claims_per_txn == 9
    seed(store, keys, [machine(f"m{i}", cpu=8000) for i in range(5)], [batch_job("big", 25)])
    attempts = []
    result = placer(store, keys, committer=committer, attempts=attempts).place(
        "big", ReplicaView(store, keys), least_loaded)
    assert len(result.placed) == 25 and result.pending == ()
    assert [(a.outcome, a.transactions, a.failed_transactions) for a in attempts] == [(O.COMMITTED, 3, 0)]
    assert_consistent(store, keys)


def test_oversized_gang_is_refused_and_keeps_its_reason():
    """By a committer without ``gangs`` (StoreCommitter's reserve it in chunks: test_gangs.py)."""
    store, keys = MemoryStore(max_txn_ops=20), CellKeys("gang")
    seed(store, keys, [machine(f"m{i}", cpu=8000) for i in range(5)], [batch_job("g", 25, gang=True)])
    attempts, decide, view = [], RecordingDecide(), ReplicaView(store, keys)
    committer = StoreCommitter(store, keys)
    committer.gangs = None
    with pytest.raises(PlanTooLarge, match=r"gang job 'g' has 25 tasks.*at most 9 claims"):
        placer(store, keys, commit=INC, attempts=attempts, committer=committer).place("g", view, decide)
    assert [a.outcome for a in attempts] == [O.TOO_LARGE] and decide.calls == []
    record = view.job("g").record
    assert record.tasks == "p" * 25 and "gang too large" in record.reason and "limit 9" in record.reason


def test_all_or_nothing_mode_does_not_reserve_a_job_that_is_no_gang():
    """Reservations in chunks are for gangs only: the allocs of a job that is not a gang place
    its tasks (docs/CELLSTATE.md, "Task state out of the record"), so in the all-or-nothing
    commit mode such a job larger than one txn is refused, its tasks pending with the reason."""
    store, keys = MemoryStore(max_txn_ops=20), CellKeys("aon")
    seed(store, keys, [machine(f"m{i}", cpu=8000) for i in range(5)], [batch_job("j", 25)])
    attempts, decide, view = [], RecordingDecide(), ReplicaView(store, keys)
    with pytest.raises(PlanTooLarge, match=r"'j' has 25 tasks.*at most 9 claims"):
        placer(store, keys, commit=AON, attempts=attempts).place("j", view, decide)
    assert [a.outcome for a in attempts] == [O.TOO_LARGE] and decide.calls == []
    assert list(view.allocs_of("j")) == [] and store.get(keys.gang("j")) is None
    assert view.job("j").record.tasks == "p" * 25 and "limit 9" in view.job("j").record.reason


@pytest.mark.parametrize("commit, reason", [
    (INC, "1 task: no machine has 3000 millicores free"),
    (AON, "3 tasks: gang of 3 tasks: only 2 fit (no machine has 3000 millicores free)"),
], ids=["incremental", "all-or-nothing"])
def test_what_does_not_fit_stays_pending_with_its_reason(commit, reason):
    store, keys = MemoryStore(), CellKeys("fit")
    seed(store, keys, [machine("m1", cpu=4000), machine("m2", cpu=3000)], [batch_job("j", 3, cpu=3000)])
    attempts, view = [], ReplicaView(store, keys)
    result = placer(store, keys, commit=commit, attempts=attempts).place("j", view, least_loaded)
    expected = O.COMMITTED if commit is INC else O.NOTHING_FITS
    assert [a.outcome for a in attempts] == [expected]
    assert result.reason == reason and view.job("j").record.first_attempt_at == 100.0
    assert len(result.pending) == (1 if commit is INC else 3)
    assert_consistent(store, keys)


def test_retry_count_resets_whenever_an_attempt_makes_progress():
    store, keys = MemoryStore(), CellKeys("progress")
    seed(store, keys, [machine(f"m{i}") for i in range(5)], [batch_job("j", 5)])
    clock, attempts = FakeClock(), []
    meddler = MeddlingCommitter(store, keys, spare=1, min_claims=2)
    result = placer(store, keys, retry=RetryPolicy(max_attempts=2), clock=clock, committer=meddler,
                    attempts=attempts).place("j", ReplicaView(store, keys), least_loaded)
    assert [a.outcome for a in attempts] == [O.PARTIAL] * 4 + [O.COMMITTED]
    assert [len(a.committed) for a in attempts] == [1, 1, 1, 1, 1]
    assert [a.retries for a in attempts] == [0, 1, 2, 3, 4]
    assert not result.gave_up and result.pending == ()
    assert clock.sleeps == [0.0] * 4  # no backoff after progress
    assert_consistent(store, keys)


def test_no_progress_gives_up_with_backoff_on_the_injected_clock():
    store, keys = MemoryStore(), CellKeys("stuck")
    seed(store, keys, [machine(f"m{i}") for i in range(3)], [batch_job("j", 3)])
    clock, attempts = FakeClock(), []
    meddler = MeddlingCommitter(store, keys, spare=0, min_claims=1)
    policy = RetryPolicy(max_attempts=3, base_wait_s=0.5, max_wait_s=0.75, seed=7)
    view = ReplicaView(store, keys)
    result = placer(store, keys, retry=policy, clock=clock, committer=meddler, attempts=attempts).place(
        "j", view, least_loaded)
    assert [a.outcome for a in attempts] == [O.CONFLICT] * 3 and result.gave_up
    assert len(clock.sleeps) == 2 and 0 < clock.sleeps[0] <= 0.5 and 0 < clock.sleeps[1] <= 0.75
    drawn = random.Random(7)  # each backoff is drawn before the stop check, the last one too
    assert clock.sleeps == [drawn.uniform(0, 0.5), drawn.uniform(0, 0.75)]
    drawn.uniform(0, 0.75)
    assert policy.rng.random() == drawn.random()
    assert clock.now() == pytest.approx(100.0 + sum(clock.sleeps))
    assert result.pending == (0, 1, 2)
    assert "gave up after 3 conflicting attempts" in view.job("j").record.reason
    assert "changed" in view.job("j").record.reason


def test_resource_fit_rebases_on_the_fresh_ledger_without_re_deciding():
    store, keys = MemoryStore(), CellKeys("rebase")
    seed(store, keys, [machine("m1")], [batch_job("j", 2)])
    attempts, decide = [], RecordingDecide()
    meddler = MeddlingCommitter(store, keys, spare=0, min_claims=2, times=1)
    placer(store, keys, FIT, INC, committer=meddler, attempts=attempts).place(
        "j", ReplicaView(store, keys), decide)
    assert decide.calls == [[0, 1]]
    assert [(a.outcome, a.transactions, a.failed_transactions) for a in attempts] == [(O.COMMITTED, 2, 1)]
    assert_consistent(store, keys)


@pytest.mark.parametrize("decision, message", [
    (Decision([], {7: "x"}), "reasons for tasks \\[7\\]"),
    (Decision([Claim(5, "m1", None)]), "claims task 5"),
    (Decision([Claim(1, "m1", None), Claim(0, "m1", None), Claim(1, "m1", None)]), "claims task 1, .* twice"),
], ids=["stray-reason", "unasked-task", "task-twice"])
def test_inconsistent_decisions_are_refused(decision, message):
    store, keys = MemoryStore(), CellKeys("bad")
    seed(store, keys, [machine("m1")], [batch_job("j", 2)])
    with pytest.raises(ValueError, match=message):
        placer(store, keys).place("j", ReplicaView(store, keys), lambda job, tasks, view: decision)


def test_missing_job_is_reported_gone():
    store, keys = MemoryStore(), CellKeys("gone")
    seed(store, keys, [machine("m1")])
    result = placer(store, keys).place("nope", ReplicaView(store, keys), least_loaded)
    assert result.job_gone and result.attempts == ()


@pytest.mark.parametrize("text, member", [("sequence", SEQ), ("resource-fit", FIT), ("RESOURCE_FIT", FIT),
                                          ("all-or-nothing", AON), ("incremental", INC)],
                         ids=["seq", "fit", "fit-name", "gang", "inc"])
def test_modes_parse_from_their_labels(text, member):
    assert type(member).parse(text) is member


def test_unknown_mode_names_the_choices():
    with pytest.raises(ValueError, match="choose one of sequence, resource-fit"):
        ConflictMode.parse("fine")


@pytest.mark.parametrize("gang", [False, True], ids=["incremental-halves", "gang-refused"])
def test_plan_over_the_request_size_limit_is_halved_or_refused(gang):
    store, keys = MemoryStore(max_request_bytes=2500), CellKeys("bytes")
    seed(store, keys, [machine(f"m{i}", cpu=8000) for i in range(8)], [batch_job("j", 8, gang=gang)])
    attempts, view = [], ReplicaView(store, keys)
    run = placer(store, keys, attempts=attempts)
    if gang:
        with pytest.raises(PlanTooLarge, match="'j'.*request is too large"):
            run.place("j", view, least_loaded)
        assert view.job("j").record.tasks == "p" * 8 and "too large" in view.job("j").record.reason
        assert [a.outcome for a in attempts] == [O.TOO_LARGE]
    else:
        result = run.place("j", view, least_loaded)
        assert result.pending == () and attempts[0].outcome is O.COMMITTED
        assert attempts[0].transactions > 1 and attempts[0].failed_transactions == 0
    assert_consistent(store, keys)


def test_a_job_taken_again_is_decided_on_its_task_states_as_they_are_now():
    store, keys = MemoryStore(), CellKeys("again")
    seed(store, keys, [machine("m1", cpu=4000), machine("m2", cpu=3000)], [batch_job("j", 3, cpu=3000)])
    view, ours, decide = ReplicaView(store, keys), placer(store, keys), RecordingDecide()
    left = ours.place("j", view, decide).pending
    assert len(left) == 1 and ours.place("j", view, decide).pending == left  # unchanged: the same task
    assert decide.calls[1:] == [list(left)]
    seed(store, keys, [machine("m3", cpu=4000)])
    assert placer(store, keys, name="rival").place("j", ReplicaView(store, keys), least_loaded).pending == ()
    view.pump()
    assert ours.place("j", view, decide).pending == () and len(decide.calls) == 2  # nothing left to decide


def test_an_evicting_claim_whose_victim_ended_meanwhile_goes_back_to_the_scheduler():
    """The view moved on between the decision and its plan: the victim's job was killed. The
    claim is decided again (on the room the kill left), not refused as a bad decision."""
    store, keys = MemoryStore(), CellKeys("victim-gone")
    seed(store, keys, [machine("m1")], [batch_job("low", 4), batch_job("j", 1)])
    view = ReplicaView(store, keys)
    placer(store, keys).place("low", view, least_loaded)  # m1 full

    def decide(job, tasks, view):
        if len(decide_calls.calls) == 1:
            kill_job(store, keys, "low")
            view.pump(0.0)
            return Decision([Claim(0, "m1", job.record.job.request, evicts=(("low", 0),))])
        return least_loaded(job, tasks, view)

    decide_calls = RecordingDecide(decide)
    attempts = []
    result = placer(store, keys, FIT, attempts=attempts).place("j", view, decide_calls)
    assert decide_calls.calls == [[0], [0]] and [c.machine_id for c in result.placed] == ["m1"]
    assert [c.evicts for c in result.placed] == [()]
    assert_consistent(store, keys)


@pytest.mark.parametrize("gone", ["down", "deleted"])
def test_claims_on_a_machine_that_failed_during_the_decision_go_back_to_the_scheduler(gone):
    """The view moved on between the decision and its plan: m1 went down (or its key was
    deleted). Its claims are decided again (on m2), not committed onto the down machine (its
    revision is the view's) nor refused as a bad decision."""
    store, keys = MemoryStore(), CellKeys("failed-meanwhile")
    seed(store, keys, [machine("m1", cpu=8000), machine("m2")], [batch_job("j", 2)])
    view = ReplicaView(store, keys)

    def decide(job, tasks, view):
        request = job.record.job.request
        if len(decide_calls.calls) > 1:  # m1 is down now
            return Decision([Claim(task, "m2", request) for task in tasks])
        kv = store.get(keys.machine("m1"))
        if gone == "down":
            store.put(kv.key, encode_machine(replace(decode_machine(kv.key, kv.value), state=MachineState.DOWN)))
        else:
            store.delete(kv.key)
        view.pump(0.0)
        return Decision([Claim(task, "m1", request) for task in tasks])

    decide_calls = RecordingDecide(decide)
    result = placer(store, keys, FIT).place("j", view, decide_calls)
    assert decide_calls.calls == [[0, 1], [0, 1]]
    assert sorted(c.machine_id for c in result.placed) == ["m2", "m2"]
    assert_consistent(store, keys)


class _VictimToucher(StoreCommitter):
    """Rewrites job ``low``'s record (unchanged) before the first commit: its revision moves."""

    touched = False

    def commit(self, plan):
        if not self.touched:
            self.touched = True
            kv = self.store.get(self.keys.job("low"))
            self.store.put(kv.key, kv.value)
        return super().commit(plan)


def test_a_claim_that_fitted_by_a_rejected_eviction_goes_back_to_the_scheduler():
    """Claim 0 evicts two of low's tasks on the full m1 and claim 1 uses the second one's room.
    The txn fails on low's revision: claim 0 is rejected, claim 1 (m1 unchanged) kept by the
    split, but without claim 0's eviction it no longer fits: it is decided again, not sent in an
    overcommitting plan."""
    store, keys = MemoryStore(), CellKeys("eviction-rejected")
    high = JobRecord.new(Job("j", JobKind.BATCH, 2, Resources(1000, 512), priority=100), 1.0)
    seed(store, keys, [machine("m1")], [batch_job("low", 4), high])
    view = ReplicaView(store, keys)
    placer(store, keys).place("low", view, least_loaded)  # m1 full
    request = high.job.request

    def decide(job, tasks, view):
        if len(decide_calls.calls) > 1:
            return Decision([], {t: "no room" for t in tasks})
        return Decision([Claim(0, "m1", request, evicts=(("low", 0), ("low", 1))), Claim(1, "m1", request)])

    decide_calls = RecordingDecide(decide)
    result = placer(store, keys, FIT, committer=_VictimToucher(store, keys)).place("j", view, decide_calls)
    assert decide_calls.calls == [[0, 1], [0, 1]] and result.placed == ()
    assert view.job("low").record.tasks == "aaaa"
    assert_consistent(store, keys)


def test_a_gang_whose_claim_no_longer_fits_goes_back_whole():
    """m2 fills up during the decision of a two-task gang: its claim there no longer fits, so
    neither claim is committed (all-or-nothing), not the one on m1 alone."""
    store, keys = MemoryStore(), CellKeys("gang-stale")
    seed(store, keys, [machine("m1"), machine("m2")], [batch_job("g", 2, gang=True), batch_job("filler", 4)])
    view = ReplicaView(store, keys)

    def decide(job, tasks, view):
        if len(decide_calls.calls) > 1:
            return Decision([], {t: "no room" for t in tasks})
        placer(store, keys).place("filler", view, lambda j, t, v: Decision([Claim(i, "m2", j.record.job.request)
                                                                            for i in t]))
        return Decision([Claim(0, "m1", job.record.job.request), Claim(1, "m2", job.record.job.request)])

    decide_calls = RecordingDecide(decide)
    result = placer(store, keys, FIT, AON).place("g", view, decide_calls)
    assert decide_calls.calls == [[0, 1], [0, 1]] and result.placed == ()
    assert view.job("g").record.tasks == "pp" and view.job("filler").record.tasks == "aaaa"
    assert_consistent(store, keys)


@pytest.mark.parametrize("conflict", [SEQ, FIT], ids=["sequence", "fit"])
def test_a_task_placed_without_the_record_meanwhile_is_dropped_not_decided_again(cell, conflict):
    """Issue 19.2: "one" places task 1 of J without writing its record (J's first attempt is
    recorded, no reason changes); "two", on a copy from before, claims tasks 0-2. Its txn fails
    on task 1's alloc key (the job's revision is unchanged); the fresh job read back has task 1
    placed, so the claim is dropped, the others go again at once and nothing is decided twice."""
    store, keys = cell
    job = replace(batch_job("J", 4), first_attempt_at=1.0)
    seed(store, keys, [machine(f"m{i}") for i in range(4)], [job])
    one_view, two_view = ReplicaView(store, keys), ReplicaView(store, keys)
    req = job.job.request

    def only_task_1(entry, tasks, view):
        return Decision([Claim(1, "m3", req)])

    first = placer(store, keys, conflict, name="one").place("J", one_view, only_task_1)
    assert [c.task_index for c in first.placed] == [1]
    assert store.get(keys.job("J")).mod_revision == one_view.job("J").mod_revision  # no record written
    calls = []

    def three_tasks(entry, tasks, view):
        calls.append(list(tasks))
        return Decision([Claim(t, f"m{t}", req) for t in (0, 1, 2) if t in tasks])

    attempts = []
    second = placer(store, keys, conflict, name="two", attempts=attempts).place("J", two_view, three_tasks)
    assert calls == [[0, 1, 2, 3]]
    assert sorted(c.task_index for c in second.placed) == [0, 2]
    first_attempt = attempts[0]
    assert first_attempt.failed_transactions == 1 and first_attempt.job_conflicts == 1
    assert first_attempt.conflicting_machines == () and first_attempt.stale_retries == 0
    assert two_view.job("J").record.tasks == "aaap"
    assert_consistent(store, keys)
