"""One scheduling loop: a seeded single-scheduler workload placed by ``omega scheduler run`` on a
real etcd and by the fauxmaster on its memory store and virtual clock ends with the same
placements, task for task (both drive ``omega.cycle.SchedulingCycle``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from cellstate.codec import decode_alloc, encode_machine
from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.submit import submit_jobs
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.fauxmaster.scheduler_process import SchedulerConfig
from tools.trace.events import JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter

ROOT = Path(__file__).resolve().parents[2]
SEED = 11


def _machines() -> list[Machine]:
    return [Machine(f"m{i:02d}", Resources.of(3000 + 1000 * (i % 3), 4096 + 2048 * (i % 2)), zone=f"z{i % 3}")
            for i in range(12)]


def _jobs() -> list[Job]:
    """Jobs of 1-7 tasks and varied shapes (about 92 % of its CPU), and one that never fits
    (its id sorts last, so its failed decisions come after every other job's)."""
    jobs = [Job(f"j{n:02d}", JobKind.BATCH, 1 + n % 7, Resources.of(250 + 125 * (n % 5), 256 + 128 * (n % 4)))
            for n in range(24)]
    return jobs + [Job("zz-too-big", JobKind.BATCH, 2, Resources.of(9000, 256))]


def _placements(allocs) -> dict[tuple[str, int], str]:
    return {(a.job_id, a.task_index): a.machine_id for a in allocs}


def _replayed(tmp_path) -> dict[tuple[str, int], str]:
    trace = tmp_path / "one-loop.omt"
    header = TraceHeader("one-loop test", "2024-01-01T00:00:00Z", "12 machines")
    with TraceWriter(trace, header) as writer:
        for machine in _machines():
            writer.write(MachineAdd(0.0, machine))
        for job in _jobs():
            writer.write(JobSubmit(0.0, job))
    stores = []
    config = ReplayConfig(schedulers=[SchedulerConfig("batch0", kind="batch", seed=SEED)], until=60.0)
    replay(str(trace), config, setup=lambda schedulers, core: stores.append((schedulers[0].store,
                                                                            schedulers[0].view.keys)))
    store, keys = stores[0]
    return _placements(decode_alloc(kv.key, kv.value) for kv in store.range(keys.kind_prefix("allocs")).kvs)


def _live(etcd_server, etcd_store, cell_keys) -> dict[tuple[str, int], str]:
    etcd_store.txn((), [Put(cell_keys.machine(m.id), encode_machine(m)) for m in _machines()])
    submit_jobs(etcd_store, cell_keys, _jobs(), time.time())  # one txn, one submission time: ids break ties
    cmd = [sys.executable, "-m", "tools.cli", "scheduler", "run", "--kind", "batch", "--name", "batch0",
           "--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell, "--seed", str(SEED),
           "--duration", "6"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return _placements(decode_alloc(kv.key, kv.value) for kv in etcd_store.range(cell_keys.kind_prefix("allocs")).kvs)


def test_live_process_and_fauxmaster_place_the_same_tasks_on_the_same_machines(tmp_path, etcd_server,
                                                                                etcd_store, cell_keys):
    live = _live(etcd_server, etcd_store, cell_keys)
    replayed = _replayed(tmp_path)
    fitting = sum(job.tasks for job in _jobs() if job.id != "zz-too-big")
    assert len(live) == fitting, f"the live scheduler placed {len(live)} of {fitting} tasks"
    assert not any(job_id == "zz-too-big" for job_id, _ in live)
    assert live == replayed
    assert len(set(live.values())) > 6  # the decisions spread over the cell: the seed mattered
