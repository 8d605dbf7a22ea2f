"""Chaos: the scheduler reserving a 1,024-task gang is SIGKILLed between two chunks.

etcd with its default limits (128 ops per txn, 1.5 MiB per request): the gang cannot be one
txn, so it is reserved in chunks of 63 claims under a leased ``gangs/{job}`` key and placed by
one last txn (docs/CELLSTATE.md, "Gangs larger than one transaction"). The scheduler process
(tests/chaos/gang_pause_scheduler.py) pauses before its 6th chunk; the test checks that nothing
is placed, kills it (SIGKILL), waits for its lease to expire (``omega check`` then names the
orphaned reservation and only that), starts a second scheduler (``omega scheduler run``), which
releases the reservation and places the whole gang: ``omega check`` clean, no alloc of a
pending task left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from chaos_helpers import ROOT, Crew, scheduler_proc, store_on, wait_for
from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, encode_machine
from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.submit import submit_jobs

pytestmark = pytest.mark.slow

TASKS = 1024
PAUSE_AT = 6  # 5 chunks of 63 reserved when it is killed
ETCD_DEFAULTS = EtcdOptions(unsafe_no_fsync=True, max_txn_ops=128, max_request_bytes=1_572_864)


def test_a_scheduler_killed_between_gang_chunks_leaves_nothing_placed_and_is_released(cell_keys, tmp_path):
    keys = cell_keys
    cluster = EtcdCluster(1, options=ETCD_DEFAULTS).start()
    store = store_on(cluster)
    crew = Crew()
    paused = None
    try:
        store.txn((), [Put(keys.machine(f"m{i:03d}"), encode_machine(Machine(f"m{i:03d}", Resources(16_000, 16_384, 100_000))))
                       for i in range(80)])
        submit_jobs(store, keys, [Job("gang", JobKind.BATCH, TASKS, Resources(1000, 512), gang=True)], time.time())
        marker = tmp_path / "paused"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(tmp_path / "b1.out", "w") as out, open(tmp_path / "b1.err", "w") as err:
            paused = subprocess.Popen([sys.executable, str(ROOT / "tests/chaos/gang_pause_scheduler.py"),
                                       ",".join(cluster.endpoints), keys.cell, "b1", str(marker), str(PAUSE_AT)],
                                      cwd=ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        wait_for(lambda: marker.exists() and marker.read_text().endswith("\n") or paused.poll() is not None, 60,
                 "the scheduler paused between chunks")
        assert paused.poll() is None, (tmp_path / "b1.err").read_text()[-3000:]
        assert marker.read_text().split() == [str(PAUSE_AT - 1), str((PAUSE_AT - 1) * 63)]
        # between chunks: reserved, nothing placed, the reservation legal while its key lives
        assert _record(store, keys).tasks == "p" * TASKS
        assert len(_allocs(store, keys)) == (PAUSE_AT - 1) * 63
        assert store.get(keys.gang("gang")) is not None
        report = check_cell(store, keys)
        assert report.ok, report.violations

        paused.send_signal(signal.SIGKILL)
        paused.wait(10)
        wait_for(lambda: store.get(keys.gang("gang")) is None, 30, "the gang key gone with its lease")
        report = check_cell(store, keys)
        assert report.kinds() == {"orphaned-reservation"}, report.violations
        assert _record(store, keys).tasks == "p" * TASKS  # no agent would start a reserved task

        crew.add(scheduler_proc("batch", "b2", cluster.endpoints, keys.cell, tmp_path, 1))
        wait_for(lambda: _record(store, keys).tasks == "a" * TASKS, 90, "the gang placed by the second scheduler")
        crew.assert_alive()
        report = check_cell(store, keys)
        assert report.ok, report.violations
        allocs = _allocs(store, keys)
        assert len(allocs) == TASKS and {a.scheduler for a in allocs} == {"b2"}
        assert store.get(keys.gang("gang")) is None
    finally:
        if paused is not None and paused.poll() is None:
            paused.send_signal(signal.SIGKILL)
            paused.wait(10)
        statuses = crew.stop_all()
        store.close()
        cluster.stop()
    assert all(status == 0 for status in statuses.values()), statuses


def _record(store, keys):
    kv = store.get(keys.job("gang"))
    return decode_job_record(kv.key, kv.value)


def _allocs(store, keys):
    return [decode_alloc(kv.key, kv.value) for kv in store.range(keys.job_allocs("gang")).kvs]
