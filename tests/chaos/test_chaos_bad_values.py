"""Chaos: bad values in machine keys while three scheduler processes commit (issue 19, item 4).

A 40-machine cell under a seeded workload, three ``omega scheduler run`` processes (batch,
batch, service) and the agents. Every ~0.6 s a burst of jobs is submitted and at once one txn
puts garbage bytes into three machine keys and one misfiled value (machine Y's valid value
under machine X's key), chosen among the machines with the most room, while jobs trickle in; a round later the test repairs them (each ledger recomputed from the machine's allocations,
which nobody can change while the machine is quarantined), so the schedulers meet fresh bad
values again and again, some of them in a failed commit's read-back. The last round's values
stay. Then: every process is still up; every scheduler's stats count the 4 quarantined keys;
the monitor shows them; ``check_cell`` names exactly those 4 keys (every other ledger equals
its allocations: no lost update, no ledger written under a key that was not compared); the
processes stop cleanly.
"""

from __future__ import annotations

import io
import time
from dataclasses import replace

import pytest
from rich.console import Console

from chaos_helpers import (
    Crew, Trickle, agents_proc, chaos_cell, chaos_workload, own_etcd, scheduler_proc, seeded, store_on,
    submit_through_outages, wait_for,
)
from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_machine
from cellstate.codec.fields import CodecError
from cellstate.model import MachineState
from cellstate.replica.watched import Replica
from cellstate.resources import ZERO
from cellstate.codec.stats import decode_stats
from cellstate.store import Put, mod_revision_is
from tools.monitor.model import build_frame
from tools.monitor.render import render_frame

pytestmark = pytest.mark.slow

MACHINES = 40
ROUNDS = 10
BURST = 4
GARBAGE_PER_ROUND = 3


def test_bad_machine_values_are_quarantined_while_schedulers_commit(cell_keys, tmp_path):
    rng = seeded(19_4)
    keys = cell_keys
    arrivals = chaos_workload(seed=19, duration_s=30.0)
    upfront = [job for t, job in arrivals if t < 8.0]
    cluster = own_etcd()
    store = store_on(cluster)
    crew = Crew()
    try:
        chaos_cell(store, keys, machines=MACHINES, seed=4)
        originals = {m.id: m for m in (decode_machine(kv.key, kv.value)
                                       for kv in store.range(keys.kind_prefix("machines")).kvs)}
        submit_through_outages(store, keys, upfront, time.monotonic() + 10)
        trickle = Trickle(store, keys, [(t - 8.0, job) for t, job in arrivals if t >= 8.0], scale=0.4)
        schedulers = [crew.add(scheduler_proc(kind, name, cluster.endpoints, keys.cell, tmp_path, seed))
                      for seed, (kind, name) in enumerate([("batch", "b1"), ("batch", "b2"), ("service", "s1")])]
        crew.add(agents_proc(cluster.endpoints, keys.cell, tmp_path))
        crew.wait_ready()
        bad: dict[str, str] = {}
        deadline = time.monotonic() + 90
        for _ in range(ROUNDS):
            if bad:
                _repair(store, keys, bad, originals)
            for _ in range(BURST):  # work for the schedulers right when the values go bad
                trickle.one_now(deadline)
            bad = _corrupt(store, keys, rng, _roomiest(store, keys))
            for _ in range(6):
                time.sleep(0.1)
                trickle.due(deadline)
            crew.assert_alive()
        trickle.flush(deadline)
        wait_for(lambda: not _pending_that_fit(store, keys, bad), 60, "no pending task that fits a good machine",
                 0.25)
        crew.assert_alive()
        names = [s.name for s in schedulers]
        wait_for(lambda: _quarantined_counts(store, keys, names) == {name: len(bad) for name in names}, 15,
                 f"every scheduler's stats counting the {len(bad)} quarantined keys")
        replica = Replica(store, keys)
        replica.sync()
        frame = build_frame(replica, time.time())
        replica.close()
        console = Console(record=True, width=200, file=io.StringIO())
        console.print(render_frame(frame))
        screen = console.export_text()
        report = check_cell(store, keys)
    finally:
        statuses = crew.stop_all()
        store.close()
        cluster.stop()
    assert all(status == 0 for status in statuses.values()), statuses
    assert frame.quarantined == len(bad) and set(bad) <= {line.split(": ")[0] for line in frame.errors}
    assert f"quarantined: {len(bad)} bad value(s)" in screen and "b1 4" in screen, screen
    assert sorted(v.key for v in report.violations) == sorted(bad), report.violations  # one each, nothing else
    assert {v.key: v.kind for v in report.violations} == bad
    logs = "\n".join(s.output() for s in schedulers)
    assert all(key in logs for key in bad)
    assert "Traceback" not in logs, logs[-3000:]
    print(f"{ROUNDS} rounds of bad values; allocs {report.allocs}; schedulers {statuses}")


def _corrupt(store, keys, rng, machine_ids: list[str]) -> dict[str, str]:
    """One txn: garbage in GARBAGE_PER_ROUND machine keys, machine Y's current value under X's key.
    Returns {bad key: the violation kind check_cell must report}."""
    chosen = rng.sample(machine_ids, GARBAGE_PER_ROUND + 2)
    garbage, (x, y) = chosen[:GARBAGE_PER_ROUND], chosen[GARBAGE_PER_ROUND:]
    ops = [Put(keys.machine(m), b"\xc1garbage " + m.encode()) for m in garbage]
    ops.append(Put(keys.machine(x), store.get(keys.machine(y)).value))
    assert store.txn((), ops, ()).succeeded
    return {**{keys.machine(m): "undecodable" for m in garbage}, keys.machine(x): "key-mismatch"}


def _roomiest(store, keys, count: int = 10) -> list[str]:
    """Ids of the ``count`` up machines with the most free cpu (where the next claims go)."""
    machines = [decode_machine(kv.key, kv.value) for kv in store.range(keys.kind_prefix("machines")).kvs]
    up = sorted((m for m in machines if m.state is MachineState.UP), key=lambda m: (-m.free.cpu, m.id))
    return sorted(m.id for m in up[:count])


def _repair(store, keys, bad: dict[str, str], originals) -> None:
    """Put each bad machine key back: its original machine with the ledger of its allocations
    (guarded by the bad value's revision: nobody else may have written it meanwhile)."""
    prefix = len(keys.kind_prefix("machines"))
    allocs = [decode_alloc(kv.key, kv.value) for kv in store.range(keys.kind_prefix("allocs")).kvs]
    for key in bad:
        machine_id = key[prefix:]
        mine = [a for a in allocs if a.machine_id == machine_id]
        total = ZERO
        for alloc in mine:
            total = total + alloc.resources
        fixed = replace(originals[machine_id], allocated=total, task_count=len(mine), writer="test-repair")
        seen = store.get(key)
        assert store.txn([mod_revision_is(key, seen.mod_revision)], [Put(key, encode_machine(fixed))], ()).succeeded


def _pending_that_fit(store, keys, bad: dict[str, str]) -> list[str]:
    """Jobs with a pending task that some up, good machine has room for."""
    free = []
    for kv in store.range(keys.kind_prefix("machines")).kvs:
        if kv.key not in bad:
            machine = decode_machine(kv.key, kv.value)
            if machine.state is MachineState.UP:
                free.append(machine.free)
    records = [decode_job_record(kv.key, kv.value) for kv in store.range(keys.kind_prefix("jobs")).kvs]
    return sorted(r.id for r in records if not r.killed and "p" in r.tasks
                  and any(r.job.request.fits_in(room) for room in free))


def _quarantined_counts(store, keys, names: list[str]) -> dict[str, int]:
    counts = {}
    for name in names:
        kv = store.get(keys.stats(name))
        try:
            counts[name] = decode_stats(kv.key, kv.value).quarantined if kv is not None else -1
        except CodecError:
            counts[name] = -2
    return counts
