"""How often one Borg decision enters its scheduler file (schedulers/borg/scheduler.py): the
scheduler is the configuration and ``decide``; the walk, the search state and the post-filter
stage (preemption) live beside it (docs/BORG.md, "Seams"). Counted with ``sys.setprofile``:
an entry is a call whose code is in scheduler.py made from code outside it."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from borglib import PriorityView
from viewlib import job, machine

import schedulers.borg.scheduler as borg_scheduler
from schedulers.borg.scheduler import BorgScheduler
from schedulers.chain_spec import borg_pipeline
from schedulers.chains import make_scheduler

SCHEDULER_FILE = str(Path(borg_scheduler.__file__).resolve())


def file_calls(call, path: str = SCHEDULER_FILE) -> tuple[int, int]:
    """(entries into ``path`` from other files, all calls of code in ``path``) while ``call()`` runs."""
    entries = calls = 0

    def profile(frame, event, arg):
        nonlocal entries, calls
        if event != "call" or frame.f_code.co_filename != path:
            return
        calls += 1
        caller = frame.f_back
        if caller is None or caller.f_code.co_filename != path:
            entries += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entries, calls


def file_visits(call, path: str = SCHEDULER_FILE) -> tuple[int, int, int]:
    """(how often the sequence of calls into the repository's code, tests and the venv aside,
    comes to ``path`` from another file, the calls in that sequence, its distinct files) while
    ``call()`` runs."""
    root = str(Path(SCHEDULER_FILE).parents[2])
    files: list[str] = []

    def profile(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(root) and "/tests/" not in name and "/.venv/" not in name:
            files.append(name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    visits = sum(1 for i, name in enumerate(files) if name == path and (i == 0 or files[i - 1] != path))
    return visits, len(files), len(set(files))


def _cell() -> PriorityView:
    """Eight machines of 4000 cpu, each full but 1000 cpu with one priority-1 task."""
    view = PriorityView([machine(f"m{i}", cpu=4000, memory=8192) for i in range(8)])
    view.add_job(job("low", tasks=8, cpu=3000, memory=100, priority=1))
    for task in range(8):
        view.place("low", task, f"m{task}")
    return view


def test_a_decision_enters_the_scheduler_file_at_most_twice():
    view = _cell()
    sched = make_scheduler("borg", "b", 1)
    fits = view.add_job(job("fits", tasks=3, cpu=500, memory=100, priority=5))
    entries, calls = file_calls(lambda: sched.decide(fits, [0, 1, 2], view))
    assert entries <= 2 and calls <= 2


def test_a_preempting_decision_enters_the_scheduler_file_at_most_twice():
    view = _cell()
    sched = make_scheduler("borg", "b", 1)
    big = view.add_job(job("big", tasks=2, cpu=2500, memory=100, priority=5))
    decisions = []
    entries, calls = file_calls(lambda: decisions.append(sched.decide(big, [0, 1], view)))
    assert [len(c.evicts) for c in decisions[0].claims] == [1, 1]  # placed by the post-filter stage
    assert entries <= 2 and calls <= 2


class _Recorder:
    """A post-filter that nominates nothing and notes the jobs it was asked about."""

    name = "recorder"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def nominate(self, pipeline, ctx):
        self.asked.append(ctx.spec.id)
        return None


@pytest.mark.parametrize("preemption", [False, True], ids=["preemption-off", "preemption-on"])
def test_post_filters_run_in_order_when_a_task_fits_nowhere(preemption):
    view = _cell()
    recorder = _Recorder()
    pipeline = borg_pipeline().with_post_filters((recorder,))
    sched = BorgScheduler("b", random.Random(1), pipeline, preemption=preemption)
    names = [p.name for p in sched.pipeline.post_filters]
    assert names == (["recorder", "preemption"] if preemption else ["recorder"])
    fits = view.add_job(job("fits", tasks=1, cpu=500, memory=100, priority=5))
    assert sched.decide(fits, [0], view).claims and recorder.asked == []  # a feasible machine: not run
    big = view.add_job(job("big", tasks=1, cpu=2500, memory=100, priority=5))
    decision = sched.decide(big, [0], view)
    assert recorder.asked == ["big"]
    assert [len(c.evicts) for c in decision.claims] == ([1] if preemption else [])
    assert sched.counters.preemption_passes == 1


def test_a_borg_scheduler_without_preemption_has_no_post_filter():
    sched = make_scheduler("borg", "b", 1, {"preemption": False})
    assert sched.pipeline.post_filters == ()


if __name__ == "__main__":  # the counts for docs/BORG.md
    for name, spec in (("fits", {"jid": "fits", "tasks": 3, "cpu": 500, "memory": 100, "priority": 5}),
                       ("preempts", {"jid": "big", "tasks": 2, "cpu": 2500, "memory": 100, "priority": 5})):
        for count in (file_calls, file_visits):
            view = _cell()
            sched = make_scheduler("borg", "b", 1)
            entry = view.add_job(job(**spec))
            tasks = list(range(entry.record.job.tasks))
            print(name, count.__name__, count(lambda: sched.decide(entry, tasks, view)))
