"""submit_jobs and kill_job against a real etcd."""

from __future__ import annotations

import pytest

from cell_helpers import add_machines, place
from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.etcd.store import EtcdStore
from cellstate.model import Job, JobKind, JobRecord, TaskState
from cellstate.resources import ZERO, Resources
from cellstate.store import PermissionDenied, Put, TxnTooLarge, Unavailable
from cellstate.submit import (
    JobNotFound, JobsExist, KillConflict, UnreadableRecord, kill_job, submit_jobs, submit_retrying, txn_chunks,
)

REQUEST = Resources.of(1000, 1024)


def job(job_id: str, tasks: int = 2) -> Job:
    return Job(job_id, JobKind.BATCH, tasks, REQUEST, duration_s=10.0)


def stored_jobs(store, keys) -> dict[str, JobRecord]:
    kvs = store.range(keys.kind_prefix("jobs")).kvs
    return {rec.id: rec for rec in (decode_job_record(kv.key, kv.value) for kv in kvs)}


@pytest.fixture
def small_store(etcd_server):
    """A store that allows 4 ops per txn (so submissions and kills split)."""
    store = EtcdStore(etcd_server.endpoints, max_txn_ops=4)
    yield store
    store.close()


def test_submit_round_trip(etcd_store, cell_keys):
    jobs = [job("a", 3), job("b", 1)]
    revision = submit_jobs(etcd_store, cell_keys, jobs, now=12.5)
    records = stored_jobs(etcd_store, cell_keys)
    assert records == {j.id: JobRecord.new(j, 12.5) for j in jobs}
    assert {kv.mod_revision for kv in etcd_store.range(cell_keys.kind_prefix("jobs")).kvs} == {revision}


@pytest.mark.parametrize("store_fixture", ["etcd_store", "small_store"], ids=["one-txn", "split-txns"])
def test_existing_id_refuses_whole_submission(request, cell_keys, store_fixture):
    store = request.getfixturevalue(store_fixture)
    submit_jobs(store, cell_keys, [job("c")], now=1.0)
    before = store.revision()
    with pytest.raises(JobsExist) as err:
        submit_jobs(store, cell_keys, [job(f"n{i}") for i in range(6)] + [job("c")], now=2.0)
    assert err.value.job_ids == ("c",) and err.value.committed == 0
    assert set(stored_jobs(store, cell_keys)) == {"c"}
    assert store.revision() == before


def test_split_submission_writes_all(small_store, cell_keys):
    jobs = [job(f"j{i:02d}") for i in range(11)]
    submit_jobs(small_store, cell_keys, jobs, now=3.0)
    assert sorted(stored_jobs(small_store, cell_keys)) == [j.id for j in jobs]


def test_duplicate_id_within_submission(etcd_store, cell_keys):
    with pytest.raises(ValueError, match="appears twice"):
        submit_jobs(etcd_store, cell_keys, [job("d"), job("d")], now=1.0)
    assert stored_jobs(etcd_store, cell_keys) == {}


@pytest.mark.parametrize("max_ops, max_bytes, sizes", [
    (4, 10_000, [4, 4, 2]), (100, 10_000, [10]), (100, 600, [3, 3, 3, 1]),
], ids=["op-limit", "fits", "byte-limit"])
def test_txn_chunks(max_ops, max_bytes, sizes):
    records = [(f"/k/{i}", b"x" * 50) for i in range(10)]
    chunks = txn_chunks(records, max_ops, max_bytes)
    assert [len(c) for c in chunks] == sizes
    assert [r for c in chunks for r in c] == records


def _placed_cell(store, keys, tasks=5, machines=3):
    add_machines(store, keys, machines)
    submit_jobs(store, keys, [job("victim", tasks), job("bystander", 1)], now=1.0)
    place(store, keys, "victim", [(t, f"m{t % machines}") for t in range(tasks - 1)])
    place(store, keys, "bystander", [(0, "m0")])


@pytest.mark.parametrize("store_fixture", ["etcd_store", "small_store"], ids=["one-txn", "split-txns"])
def test_kill_releases_allocs_and_ledgers(request, etcd_store, cell_keys, store_fixture):
    _placed_cell(etcd_store, cell_keys)
    store = request.getfixturevalue(store_fixture)
    before = {kv.key: decode_alloc(kv.key, kv.value) for kv in store.range(cell_keys.job_allocs("victim")).kvs}
    released = []
    kill_job(store, cell_keys, "victim", released=released)
    assert sorted(released, key=lambda a: a.task_index) == sorted(before.values(), key=lambda a: a.task_index)
    assert len(released) == 4
    record = stored_jobs(store, cell_keys)["victim"]
    assert record.killed and record.tasks == "kkkkk"
    assert [kv.key for kv in store.range(cell_keys.kind_prefix("allocs")).kvs] == [cell_keys.alloc("bystander", 0)]
    ledgers = {kv.key.rsplit("/", 1)[1]: decode_machine(kv.key, kv.value).allocated
               for kv in store.range(cell_keys.kind_prefix("machines")).kvs}
    assert ledgers == {"m0": REQUEST, "m1": ZERO, "m2": ZERO}
    assert check_cell(store, cell_keys).ok


def test_kill_keeps_finished_tasks(etcd_store, cell_keys):
    _placed_cell(etcd_store, cell_keys, tasks=2, machines=1)
    kv = etcd_store.get(cell_keys.job("victim"))
    etcd_store.put(kv.key, encode_job_record(
        decode_job_record(kv.key, kv.value).with_tasks([1], TaskState.FINISHED)))
    kill_job(etcd_store, cell_keys, "victim")
    assert stored_jobs(etcd_store, cell_keys)["victim"].tasks == "kf"


def test_kill_missing_job(etcd_store, cell_keys):
    with pytest.raises(JobNotFound, match="nope"):
        kill_job(etcd_store, cell_keys, "nope")


class MeddlingStore:
    """Delegates to a store, but rewrites the job key before the first ``meddle`` txns."""

    def __init__(self, store, key, meddle):
        self._store, self._key, self.meddle, self.txns = store, key, meddle, 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    def txn(self, compares, success, failure=()):
        self.txns += 1
        if self.meddle:
            self.meddle -= 1
            kv = self._store.get(self._key)
            self._store.txn([], [Put(self._key, kv.value)], [])
        return self._store.txn(compares, success, failure)


# The kill's first txn (the kill marker) compares the job's create_revision, which the meddling
# leaves alone; each later one loses to it. So giving up after 5 attempts takes 6 meddles.
@pytest.mark.parametrize("meddle, attempts, ok", [(2, 5, True), (6, 5, False)], ids=["retries", "gives-up"])
def test_kill_retries_on_conflict(etcd_store, cell_keys, meddle, attempts, ok):
    _placed_cell(etcd_store, cell_keys)
    meddling = MeddlingStore(etcd_store, cell_keys.job("victim"), meddle)
    if ok:
        kill_job(meddling, cell_keys, "victim", attempts=attempts)
        assert meddling.txns == meddle + 1 and stored_jobs(etcd_store, cell_keys)["victim"].killed
    else:
        with pytest.raises(KillConflict):
            kill_job(meddling, cell_keys, "victim", attempts=attempts)
        assert not stored_jobs(etcd_store, cell_keys)["victim"].killed


# ----------------------------------------------------------- idempotent retries, unreadable records


class AmbiguousStore:
    """Delegates to a store; its first ``lose`` txns commit, then raise Unavailable as if the
    answer had been lost (a restart or a leader loss right after the commit)."""

    def __init__(self, store, lose: int, error=None):
        self._store, self.lose, self.txns = store, lose, 0
        self.error = error or Unavailable("etcd txn failed: UNAVAILABLE: answer lost")

    def __getattr__(self, name):
        return getattr(self._store, name)

    def txn(self, compares, success, failure=()):
        self.txns += 1
        result = self._store.txn(compares, success, failure)
        if self.lose:
            self.lose -= 1
            raise self.error
        return result


def _written_once(store, keys, jobs):
    kvs = {kv.key: kv for kv in store.range(keys.kind_prefix("jobs")).kvs}
    assert sorted(kvs) == sorted(keys.job(j.id) for j in jobs)
    assert all(kv.version == 1 for kv in kvs.values()), "a job record was written twice"


@pytest.mark.parametrize("store_fixture, lose, retried", [
    ("etcd_store", 1, 1), ("etcd_store", 3, 1), ("small_store", 1, 1), ("small_store", 2, 2),
], ids=["one-txn", "one-txn-all-stored-at-once", "split-first-chunk", "split-both-chunks"])
def test_a_retry_after_a_lost_answer_submits_nothing_twice(request, cell_keys, store_fixture, lose, retried):
    """The txn committed but its answer was lost: the retry finds the jobs stored with their
    specs and counts them as submitted (it used to fail with 'already exist'); a split
    submission writes only the chunks not stored yet (7 jobs, 4 per txn: two chunks)."""
    store = AmbiguousStore(request.getfixturevalue(store_fixture), lose)
    jobs = [job(f"r{i}") for i in range(7)]
    retries = []
    submit_retrying(store, cell_keys, jobs, 5.0, retry_for=30,
                    on_retry=lambda *a: retries.append(a), max_wait=0.01)
    assert len(retries) == retried and all(isinstance(error, Unavailable) for _, error, _, _ in retries)
    _written_once(store, cell_keys, jobs)
    assert stored_jobs(store, cell_keys) == {j.id: JobRecord.new(j, 5.0) for j in jobs}


def test_a_resubmission_refuses_a_job_stored_with_another_spec(small_store, cell_keys):
    submit_jobs(small_store, cell_keys, [job("same"), job("other", tasks=3)], now=1.0)
    before = small_store.revision()
    jobs = [job("same"), job("other", tasks=2), job("new")]
    with pytest.raises(JobsExist) as err:
        submit_jobs(small_store, cell_keys, jobs, now=2.0, resubmit=True)
    assert err.value.job_ids == ("other",)
    assert small_store.revision() == before


def test_only_a_resubmission_takes_an_identical_stored_job_as_submitted(etcd_store, cell_keys):
    """A first attempt cannot have committed anything: an id already there is a clash."""
    submit_jobs(etcd_store, cell_keys, [job("twice")], now=1.0)
    with pytest.raises(JobsExist):
        submit_jobs(etcd_store, cell_keys, [job("twice"), job("fresh")], now=2.0)
    submit_jobs(etcd_store, cell_keys, [job("twice"), job("fresh")], now=2.0, resubmit=True)
    _written_once(etcd_store, cell_keys, [job("twice"), job("fresh")])


@pytest.mark.parametrize("error", [PermissionDenied("etcd denied txn"), TxnTooLarge("too large")],
                         ids=["permission-denied", "txn-too-large"])
def test_permanent_store_errors_are_not_retried(etcd_store, cell_keys, error):
    store = AmbiguousStore(etcd_store, lose=0)
    store.txn = lambda *a, **k: (_ for _ in ()).throw(error)
    with pytest.raises(type(error)):
        submit_retrying(store, cell_keys, [job("p")], 1.0, retry_for=30, max_wait=0.01)


def test_retrying_gives_up_with_the_last_error(etcd_server, cell_keys):
    """An unreachable store: retried, then its last error raised once --retry-for is spent."""
    from cellstate.etcd.ports import free_port

    retries = []
    with EtcdStore([f"127.0.0.1:{free_port()}"], timeout=1.0) as dead:
        with pytest.raises(Unavailable):
            submit_retrying(dead, cell_keys, [job("x")], 1.0, retry_for=0.5,
                            on_retry=lambda *a: retries.append(a), max_wait=0.05)
    assert retries and [attempt for attempt, *_ in retries] == list(range(1, len(retries) + 1))


def _corrupt(store, key, version=2):
    import msgpack

    kv = store.get(key)
    value = msgpack.unpackb(kv.value)
    value["v"] = version
    store.put(key, msgpack.packb(value))


@pytest.mark.parametrize("what", ["job", "machine", "alloc"])
def test_kill_of_an_unreadable_record_writes_nothing(etcd_store, cell_keys, what):
    """A record of an unknown schema version (a newer omega wrote it): UnreadableRecord naming
    the key, before any txn (it used to escape as a CodecError traceback from `omega kill`)."""
    _placed_cell(etcd_store, cell_keys)
    key = {"job": cell_keys.job("victim"), "machine": cell_keys.machine("m1"),
           "alloc": cell_keys.alloc("victim", 1)}[what]
    _corrupt(etcd_store, key)
    before = etcd_store.revision()
    with pytest.raises(UnreadableRecord, match=f"cannot read {key}: field 'v': unknown schema version 2.*"
                                               "nothing written"):
        kill_job(etcd_store, cell_keys, "victim")
    assert etcd_store.revision() == before
