"""Chaos: forced compactions while replicas watch, and watch streams cut behind a compaction.

Two ``omega scheduler run`` processes and the agents reach etcd through a ``CutProxy``. While
jobs trickle in, the test compacts etcd at its current revision every 0.2 s (watchers that
keep up are unaffected). Each cycle it also pauses the proxy (the processes fall behind),
submits a job directly, compacts past it and cuts every connection: each replica resumes from
a compacted revision, so it must list the cell again. Everyone must converge, stay alive and
leave the cell clean; RPCs cut in flight (their outcome unknown to the caller) lose nothing.
"""

from __future__ import annotations

import time

import pytest

from cellstate.store import Compacted
from chaos_helpers import (
    Crew, Trickle, agents_proc, assert_nothing_lost, chaos_cell, chaos_workload, own_etcd, scheduler_proc,
    store_on, submit_through_outages, task_counts, wait_converged,
)
from chaos_proxy import CutProxy

pytestmark = pytest.mark.slow

CYCLES = 6
COMPACT_EVERY_S = 0.2
RELIST_LINES = ("cell replica relisted after a compaction", "agents: store error, listing the cell again")


def test_replicas_relist_after_compactions_and_schedulers_converge(cell_keys, tmp_path):
    arrivals = chaos_workload(seed=14, duration_s=30.0)
    cluster = own_etcd()
    store = store_on(cluster)
    proxy = CutProxy(cluster.endpoints[0])
    crew = Crew()
    try:
        chaos_cell(store, cell_keys)
        submit_through_outages(store, cell_keys, [job for t, job in arrivals if t < 8.0], time.monotonic() + 10)
        trickle = Trickle(store, cell_keys, [(t - 8.0, job) for t, job in arrivals if t >= 8.0], scale=0.4)
        eps, cell = [proxy.endpoint], cell_keys.cell
        crew.add(agents_proc(eps, cell, tmp_path, time_scale=60.0))
        crew.add(scheduler_proc("batch", "b1", eps, cell, tmp_path, 1))
        crew.add(scheduler_proc("service", "s1", eps, cell, tmp_path, 2))
        crew.wait_ready()
        compactions = 0
        for _ in range(CYCLES):
            compactions += _compact_while_loaded(store, trickle, 1.0)
            proxy.pause()
            trickle.one_now(time.monotonic() + 5)
            compactions += _compact_now(store)
            time.sleep(0.2)
            proxy.cut()
            crew.assert_alive()
        trickle.flush(time.monotonic() + 10)
        converge_s = wait_converged(store, cell_keys, timeout=45)
        crew.assert_alive()
    finally:
        statuses = crew.stop_all()
        proxy.close()
    try:
        records = assert_nothing_lost(store, cell_keys, [job for _, job in arrivals])
    finally:
        store.close()
        cluster.stop()
    assert statuses == {"agents": 0, "b1": 0, "s1": 0}, statuses
    # Schedulers relist when their resumed watch is compacted; the agents list the cell again
    # after any store error (an RPC cut in flight usually comes first).
    relisted = {p.name: sum(p.output().count(line) for line in RELIST_LINES) for p in crew.procs}
    assert all(relisted.values()), f"a replica never listed the cell again: {relisted}"
    counts = task_counts(records)
    assert counts.get("p", 0) == 0, counts
    print(f"compactions={compactions} relists={relisted} converged in {converge_s:.1f}s; tasks {counts}")


def _compact_now(store) -> int:
    """Compact at the current revision; 0 when nothing was written since the last compaction."""
    try:
        store.compact(store.revision())
        return 1
    except Compacted:
        return 0


def _compact_while_loaded(store, trickle: Trickle, seconds: float) -> int:
    """Trickle jobs in and compact every ``COMPACT_EVERY_S`` for ``seconds``; the compactions."""
    end = time.monotonic() + seconds
    done = 0
    while time.monotonic() < end:
        trickle.due(time.monotonic() + 5)
        done += _compact_now(store)
        time.sleep(COMPACT_EVERY_S)
    return done
