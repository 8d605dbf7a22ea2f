"""Chaos: the single etcd member restarts under load (same ports, same data directory).

Schedulers (two ``omega scheduler run`` processes and one in a thread whose replica gives up
after 1 s of outage) and the hollow-machine agents keep running through two outages: a clean
stop (SIGTERM) of 2 s and a crash (SIGKILL) of 4 s. Their replicas resume from their last
revision (or the runtime retries after the replica gave up); they must all still be alive,
converge on the jobs trickled in after the outages and leave the cell clean.
"""

from __future__ import annotations

import logging
import signal
import time

import pytest

from chaos_helpers import (
    Crew, ThreadScheduler, Trickle, agents_proc, assert_nothing_lost, chaos_cell, chaos_workload, own_etcd,
    retrying, scheduler_proc, store_on, submit_through_outages, task_counts, wait_converged,
)

pytestmark = pytest.mark.slow

OUTAGES = [("stop", 2.0), ("kill", 4.0)]  # (how the member goes down, seconds down)
STOP_WITHIN_S = 12.0  # replica give-up (5 s) + one RPC timeout (5 s) + slack


def test_schedulers_and_agents_ride_out_etcd_restarts(cell_keys, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="omega.runtime")
    arrivals = chaos_workload(seed=12, duration_s=30.0)
    cluster = own_etcd()
    store = store_on(cluster)
    crew = Crew()
    threaded = None
    try:
        chaos_cell(store, cell_keys)
        submit_through_outages(store, cell_keys, [job for t, job in arrivals if t < 8.0], time.monotonic() + 10)
        trickle = Trickle(store, cell_keys, [(t - 8.0, job) for t, job in arrivals if t >= 8.0], scale=0.5)
        eps, cell = cluster.endpoints, cell_keys.cell
        crew.add(agents_proc(eps, cell, tmp_path, time_scale=60.0))
        crew.add(scheduler_proc("batch", "b1", eps, cell, tmp_path, 1))
        crew.add(scheduler_proc("service", "s1", eps, cell, tmp_path, 2))
        threaded = ThreadScheduler(store_on(cluster), cell_keys, "batch", "b2", 3, give_up_after=1.0)
        crew.wait_ready()
        for how, down_s in OUTAGES:
            _trickle_for(trickle, 2.5)
            _outage(cluster, how, down_s)
            retrying(store.revision, time.monotonic() + 20, "reading after the restart")
            crew.assert_alive()
            assert threaded.alive(), "the threaded scheduler's loop ended during the outage"
        trickle.flush(time.monotonic() + 20)
        converge_s = wait_converged(store, cell_keys, timeout=45)
        crew.assert_alive()
    finally:
        statuses = crew.stop_all()
        if threaded is not None:
            threaded.stop()
            threaded.view.replica.store.close()
    try:
        records = assert_nothing_lost(store, cell_keys, [job for _, job in arrivals])
    finally:
        store.close()
        cluster.stop()
    assert statuses == {"agents": 0, "b1": 0, "s1": 0}, statuses
    assert threaded.view.replica.resumes >= len(OUTAGES)
    assert "scheduling round failed, retrying" in caplog.text, "the threaded replica never gave up (outage too short?)"
    counts = task_counts(records)
    assert counts.get("f", 0) > 0 and counts.get("p", 0) == 0, counts
    print(f"converged {converge_s:.1f}s after the last outage; tasks {counts}")


def _trickle_for(trickle: Trickle, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        trickle.due(end + 20)
        time.sleep(0.1)


def _outage(cluster, how: str, down_s: float) -> None:
    member = cluster.members[0]
    member.stop() if how == "stop" else member.kill()
    time.sleep(down_s)
    cluster.restart_member(0)


def test_sigterm_during_an_outage_stops_within_seconds(cell_keys, tmp_path):
    """A scheduler and the agents asked to stop while etcd is down exit cleanly and promptly:
    their replicas give an outage up after a few seconds, so no thread waits out a long one."""
    cluster = own_etcd()
    store = store_on(cluster)
    crew = Crew()
    try:
        chaos_cell(store, cell_keys, machines=20)
        crew.add(scheduler_proc("batch", "b1", cluster.endpoints, cell_keys.cell, tmp_path))
        crew.add(agents_proc(cluster.endpoints, cell_keys.cell, tmp_path))
        crew.wait_ready()
        cluster.members[0].stop()
        time.sleep(1.5)  # both are inside their replica's outage wait now
        started = time.monotonic()
        for proc in crew.procs:
            proc.proc.send_signal(signal.SIGTERM)
        statuses = {proc.name: proc.stop(timeout=STOP_WITHIN_S) for proc in crew.procs}
        took = time.monotonic() - started
    finally:
        crew.stop_all()
        store.close()
        cluster.stop()
    assert statuses == {"b1": 0, "agents": 0}, statuses
    assert took < STOP_WITHIN_S, took
