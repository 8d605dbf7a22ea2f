"""Chaos: a 3-member etcd loses a member under load, one member after the other.

Each member in turn is SIGKILLed, stays down while jobs keep arriving, and is restarted on its
ports and data directory. Every client (three ``omega scheduler run`` processes, the agents and
the test's own submitter) is given all three endpoints, so whichever member it was talking to
dies at some point and it must fail over to a live one. The majority stays up, so submissions
must keep succeeding; the processes must stay alive, converge and leave the cell clean.
"""

from __future__ import annotations

import time

import pytest

from chaos_helpers import (
    Crew, Trickle, agents_proc, assert_nothing_lost, chaos_cell, chaos_workload, own_etcd, scheduler_proc,
    store_on, submit_through_outages, task_counts, wait_converged,
)

pytestmark = pytest.mark.slow

DOWN_S = 3.0
BETWEEN_S = 2.0
RESUME_LINES = ("cell replica resumed", "agents: store error, listing the cell again")


def test_clients_fail_over_when_members_die(cell_keys, tmp_path):
    arrivals = chaos_workload(seed=13, duration_s=30.0)
    cluster = own_etcd(3)
    store = store_on(cluster)
    crew = Crew()
    try:
        chaos_cell(store, cell_keys)
        submit_through_outages(store, cell_keys, [job for t, job in arrivals if t < 8.0], time.monotonic() + 10)
        trickle = Trickle(store, cell_keys, [(t - 8.0, job) for t, job in arrivals if t >= 8.0], scale=0.6)
        eps, cell = cluster.endpoints, cell_keys.cell
        crew.add(agents_proc(eps, cell, tmp_path, time_scale=60.0))
        for seed, (kind, name) in enumerate([("batch", "b1"), ("batch", "b2"), ("service", "s1")]):
            crew.add(scheduler_proc(kind, name, eps, cell, tmp_path, seed))
        crew.wait_ready()
        for index in range(len(cluster.members)):
            _trickle_for(trickle, BETWEEN_S)
            cluster.members[index].kill()
            _trickle_for(trickle, DOWN_S)  # a majority is up: submissions must go through
            cluster.restart_member(index)
            crew.assert_alive()
        trickle.flush(time.monotonic() + 10)
        converge_s = wait_converged(store, cell_keys, timeout=45)
        crew.assert_alive()
    finally:
        statuses = crew.stop_all()
    try:
        records = assert_nothing_lost(store, cell_keys, [job for _, job in arrivals])
    finally:
        store.close()
        cluster.stop()
    assert statuses == {"agents": 0, "b1": 0, "b2": 0, "s1": 0}, statuses
    # Every client's member died once: each watch broke and was resumed on a live member (the
    # agents list the cell again instead when a txn failed first).
    resumed = {p.name: sum(p.output().count(line) for line in RESUME_LINES) for p in crew.procs}
    assert all(resumed.values()), f"a process never resumed its watch: {resumed}"
    counts = task_counts(records)
    assert counts.get("f", 0) > 0 and counts.get("p", 0) == 0, counts
    print(f"converged in {converge_s:.1f}s; resumed {resumed}; tasks {counts}")


def _trickle_for(trickle: Trickle, seconds: float) -> None:
    """Submit what is due for ``seconds``; each submission must succeed within 5 s."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        trickle.due(time.monotonic() + 5)
        time.sleep(0.1)
