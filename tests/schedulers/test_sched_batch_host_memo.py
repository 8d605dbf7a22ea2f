"""The batch scheduler keeps a failing big job's hosts across decisions (``HostMemo``, trusting
the stamp of the placement it was handed): once the job gains a host, the next decision tallies
that host as the plain scan does."""

from __future__ import annotations

import random

from test_sched_indexes import TrackingView
from viewlib import job, machine

from cellstate.resources import Resources
from schedulers import batch as batch_module
from schedulers.batch import BatchScheduler


def test_a_kept_failing_jobs_hosts_follow_its_new_placement(monkeypatch):
    view = TrackingView([machine(f"m{i:02d}", cpu=2000, memory=4096,
                                 allocated=Resources.of(0 if i < 40 else 1000, 0)) for i in range(60)])
    spec = job("big", tasks=60, cpu=1500, memory=256, different_machine=True)
    view.add_job(spec)
    for task in range(40):  # 40 hosts, each left short; the other machines are short already
        view.place("big", task, f"m{task:02d}")
    scheduler = BatchScheduler("b", random.Random(1), sample_rounds=1)
    first = scheduler.decide(view.job("big"), view.job("big").record.pending_tasks(), view)
    assert not first.claims
    view.place("big", 40, "m45")  # one more host (this test view charges it past capacity): counted anew
    entry = view.job("big")
    again = scheduler.decide(entry, entry.record.pending_tasks(), view)
    monkeypatch.setattr(batch_module, "chain_applies", lambda filters: False)
    plain = BatchScheduler("b", random.Random(1), sample_rounds=1).decide(entry, entry.record.pending_tasks(), view)
    assert again == plain
    assert all("already on machine (41 machines)" in why for why in again.unplaced.values())
