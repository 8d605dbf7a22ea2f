import pytest

from cellstate.model import Job, JobKind, JobRecord
from cellstate.resources import Resources
from cellstate.plan import JobEntry
from omega.queue import JobQueue, fair_order, rendezvous_owner, rendezvous_rank


def entry(job_id, owner="a", priority=0, submitted=0.0):
    job = Job(id=job_id, kind=JobKind.BATCH, tasks=1, request=Resources(100, 100), priority=priority, owner=owner)
    return JobEntry(JobRecord.new(job, submitted), mod_revision=1)


@pytest.mark.parametrize("jobs, expected", [
    ([entry("j1", submitted=2), entry("j2", submitted=1)], ["j2", "j1"]),
    ([entry("lo", priority=1), entry("hi", priority=9, submitted=5)], ["hi", "lo"]),
    ([entry("a1", "a", submitted=1), entry("a2", "a", submitted=2), entry("a3", "a", submitted=3),
      entry("b1", "b", submitted=4)], ["a1", "b1", "a2", "a3"]),
    ([entry("y", submitted=1), entry("x", submitted=1)], ["x", "y"]),
], ids=["oldest-first", "priority-first", "owners-take-turns", "tie-by-id"])
def test_fair_order(jobs, expected):
    assert [e.id for e in fair_order(jobs)] == expected


def test_rendezvous_splits_and_is_stable():
    peers = ["s1", "s2", "s3"]
    owners = {f"j{i}": rendezvous_owner(f"j{i}", peers) for i in range(300)}
    counts = {p: list(owners.values()).count(p) for p in peers}
    assert all(60 < c < 140 for c in counts.values()), counts
    # removing a peer moves only that peer's jobs
    after = {j: rendezvous_owner(j, ["s1", "s2"]) for j in owners}
    assert all(after[j] == owners[j] for j in owners if owners[j] != "s3")


def test_select_takes_own_share_then_steals_old_jobs():
    jobs = [entry(f"j{i}", submitted=10.0) for i in range(40)]
    q1, q2 = JobQueue("s1"), JobQueue("s2")
    mine1 = {e.id for e in q1.select(jobs, ["s1", "s2"], now=10.5, limit=100)}
    mine2 = {e.id for e in q2.select(jobs, ["s1", "s2"], now=10.5, limit=100)}
    assert mine1 and mine2 and not (mine1 & mine2) and len(mine1 | mine2) == 40
    assert len(q1.select(jobs, ["s1", "s2"], now=13.0, limit=100)) == 40


def test_defer_backs_off_exponentially_and_reset_clears():
    q = JobQueue("s1", backoff_min_s=1.0, backoff_max_s=3.0)
    jobs = [entry("j")]
    assert q.defer("j", now=0.0) == 1.0
    assert q.select(jobs, [], now=0.5, limit=5) == []
    assert [e.id for e in q.select(jobs, [], now=1.0, limit=5)] == ["j"]
    assert q.defer("j", now=1.0) == 2.0
    assert q.defer("j", now=3.0) == 3.0
    assert q.next_ready_at() == 6.0
    q.reset()
    assert [e.id for e in q.select(jobs, [], now=3.1, limit=5)] == ["j"]


def test_own_share_comes_first_and_thieves_prefer_the_jobs_they_are_next_in_line_for():
    crew = ["s1", "s2", "s3"]
    jobs = [entry(f"j{i:02d}", submitted=0.0) for i in range(60)]
    picks = {me: [e.id for e in JobQueue(me).select(jobs, crew, now=10.0, limit=60)] for me in crew}
    for me, picked in picks.items():
        owned = [e.id for e in jobs if rendezvous_owner(e.id, crew) == me]
        assert picked[:len(owned)] == owned and len(picked) == 60  # own share first, in fair order
        ranks = [rendezvous_rank(j, crew, me) for j in picked[len(owned):]]
        assert ranks == sorted(ranks) and set(ranks) == {1, 2}
    # two thieves of s1's share start on different jobs
    s1_jobs = [e for e in jobs if rendezvous_owner(e.id, crew) == "s1"]
    assert JobQueue("s2").select(s1_jobs, crew, 10.0, 1) != JobQueue("s3").select(s1_jobs, crew, 10.0, 1)


def test_priority_beats_ownership():
    crew = ["s1", "s2"]
    theirs = next(f"h{i}" for i in range(100) if rendezvous_owner(f"h{i}", crew) == "s2")
    mine = next(f"l{i}" for i in range(100) if rendezvous_owner(f"l{i}", crew) == "s1")
    jobs = [entry(mine, priority=1), entry(theirs, priority=5)]
    assert [e.id for e in JobQueue("s1").select(jobs, crew, now=10.0, limit=2)] == [theirs, mine]
    assert [e.id for e in JobQueue("s1").select(jobs, crew, now=1.0, limit=2)] == [mine]  # not old enough


def test_rendezvous_rank_orders_the_crew():
    crew = ["a", "b", "c", "d"]
    for job in ("x", "y", "z"):
        ranks = sorted(crew, key=lambda p: rendezvous_rank(job, crew, p))
        assert ranks[0] == rendezvous_owner(job, crew)
        assert [rendezvous_rank(job, crew, p) for p in ranks] == [0, 1, 2, 3]
