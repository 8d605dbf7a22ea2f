"""submit_jobs and kill_job against a real etcd."""

from __future__ import annotations

import pytest

from cell_helpers import add_machines, place
from cellstate.check import check_cell
from cellstate.codec import decode_alloc, decode_job_record, decode_machine, encode_job_record
from cellstate.etcd_store import EtcdStore
from cellstate.model import Job, JobKind, JobRecord, TaskState
from cellstate.resources import ZERO, Resources
from cellstate.store import Put
from cellstate.submit import JobNotFound, JobsExist, KillConflict, kill_job, submit_jobs, txn_chunks

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


@pytest.mark.parametrize("meddle, attempts, ok", [(2, 5, True), (5, 5, False)], ids=["retries", "gives-up"])
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
