"""Chaos: scheduler processes SIGKILLed at random moments while they commit.

A 200-machine cell, a workload submitted partly up front and trickled in, three ``omega
scheduler run`` processes (batch, batch, service). A seeded loop SIGKILLs a random scheduler
every 0.1–0.5 s and starts it again at once (at least 50 kills). Then the survivors converge
and the cell must be clean: a placement is one etcd txn, so a crash leaves it either wholly
committed or not at all — never a ledger without its alloc or an alloc without its task.
"""

from __future__ import annotations

import time

import pytest

from chaos_helpers import (
    Crew, Trickle, assert_nothing_lost, chaos_cell, chaos_workload, job_records, own_etcd, scheduler_proc,
    seeded, store_on, submit_through_outages, task_counts, wait_converged, wait_for,
)

pytestmark = pytest.mark.slow

KILLS = 50
KILL_PHASE_LIMIT_S = 120.0  # bound only; ~35 s on an idle 2-core machine


def test_sigkilled_schedulers_never_leave_a_half_commit(cell_keys, tmp_path):
    rng = seeded(20240611)
    arrivals = chaos_workload(seed=11, duration_s=60.0)
    upfront = [job for t, job in arrivals if t < 10.0]
    cluster = own_etcd()
    store = store_on(cluster)
    crew = Crew()
    try:
        chaos_cell(store, cell_keys)
        submit_through_outages(store, cell_keys, upfront, time.monotonic() + 10)
        trickle = Trickle(store, cell_keys, [(t - 10.0, job) for t, job in arrivals if t >= 10.0], scale=0.45)
        schedulers = [crew.add(scheduler_proc(kind, name, cluster.endpoints, cell_keys.cell, tmp_path, seed))
                      for seed, (kind, name) in enumerate([("batch", "b1"), ("batch", "b2"), ("service", "s1")])]
        crew.wait_ready()
        started = time.monotonic()
        kills, placed_at_kills = _kill_loop(rng, schedulers, trickle, store, cell_keys)
        kill_phase_s = time.monotonic() - started
        trickle.flush(time.monotonic() + 10)
        converge_s = wait_converged(store, cell_keys, timeout=45)
        crew.assert_alive()
        victim = rng.choice(schedulers)  # one last crash, no restart: its lease makes it vanish
        victim.kill()
        killed_at = time.monotonic()
        wait_for(lambda: store.get(cell_keys.stats(victim.name)) is None, 10, f"the stats key of {victim.name} gone")
        lease_s = time.monotonic() - killed_at
    finally:
        statuses = crew.stop_all()
    try:
        records = assert_nothing_lost(store, cell_keys, [job for _, job in arrivals])
    finally:
        store.close()
        cluster.stop()
    assert kills >= KILLS, f"only {kills} kills in {KILL_PHASE_LIMIT_S} s"
    assert all(status == 0 for name, status in statuses.items() if name != victim.name), statuses
    counts = task_counts(records)
    assert counts == {"a": sum(job.tasks for _, job in arrivals)}, counts  # the cell has room for all
    mid_placement = sum(1 for placed in placed_at_kills if placed < counts["a"])
    assert mid_placement >= KILLS // 2, f"only {mid_placement} kills while tasks were still being placed"
    print(f"kill phase {kill_phase_s:.1f}s, {kills} kills ({mid_placement} while placing), stats key gone "
          f"{lease_s:.1f}s after the last crash, "
          f"converged {converge_s:.1f}s after the last kill; tasks {counts}")


def _kill_loop(rng, schedulers, trickle, store, keys) -> tuple[int, list[int]]:
    """Every 0.1–0.5 s SIGKILL a random scheduler among those serving (past start-up, so in
    its work loop) and start it again, trickling jobs in, until ``KILLS`` kills and the trickle
    are done (bounded by ``KILL_PHASE_LIMIT_S``). Returns the kills and the tasks placed at each."""
    kills = 0
    placed = []
    deadline = time.monotonic() + KILL_PHASE_LIMIT_S
    while (kills < KILLS or not trickle.done) and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.1, 0.5))
        trickle.due(deadline)
        serving = wait_for(lambda: [s for s in schedulers if s.ready()], 20, "a scheduler serving", 0.02)
        victim = rng.choice(serving)
        victim.kill()
        victim.start()
        kills += 1
        placed.append(task_counts(job_records(store, keys)).get("a", 0))
    return kills, placed
