"""The replay's nothing-fits memo: it skips only decisions that would have found nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cellstate.model import Job, JobKind
from cellstate.resources import Resources
from omega.modes import CommitMode
from omega.protocols import Decision
from tools.fauxmaster.replay import ReplayConfig, replay
from tools.trace.events import JobKill, JobSubmit, MachineAdd

from fauxmaster_traces import batch, machine, write

SCHEDULERS = [dict(name="b", kind="batch", seed=2), dict(name="s", kind="batch", jobs="service", seed=5)]
REAL_SERVICE = [dict(name="b", kind="batch", seed=2), dict(name="s", kind="service", seed=5)]


def crowded_trace(path, services: bool = True) -> str:
    """4 machines of 4 cores; waves of jobs of 1-5 cores (5 never fits) with short durations,
    so the cell is full most of the time and frees room piece by piece; ``services``: and
    three service jobs, each killed 8.5 s after its submission."""
    events = [MachineAdd(0.0, machine(i)) for i in range(4)]
    sizes = [1000, 3000, 2000, 4000, 5000, 1500, 2500, 3500]
    for wave in range(6):
        events += [JobSubmit(wave * 3.0, batch(f"w{wave}j{j}", 2, cpu=sizes[(wave + j) % len(sizes)],
                                               duration=2.0 + (j % 3)))
                   for j in range(8)]
    for wave in range(3 if services else 0):
        events += [JobSubmit(wave * 4.0 + 0.5, Job(f"s{wave}", JobKind.SERVICE, 3, Resources(1500 + 1000 * wave, 256))),
                   JobKill(wave * 4.0 + 9.0, f"s{wave}")]
    events.sort(key=lambda e: e.t)
    return write(path, events)


def verify_skips(checked: list):
    """A replay ``setup`` hook: after every refresh of a memo, each job it leaves out is decided
    anyway (on the same view, without committing) and must find no machine."""
    def setup(schedulers, core):
        for sim in schedulers:
            memo = sim.memo
            original = memo.refresh

            def refresh(changed, pending, sim=sim, memo=memo, original=original):
                touched = original(changed, pending)
                for job_id in memo.remembered():
                    entry = pending(job_id)
                    assert entry is not None, f"{job_id} is remembered but not pending"
                    tasks = entry.record.pending_tasks()
                    answer = sim.scheduler.decide(entry, tasks, sim.view)
                    mode = CommitMode.ALL_OR_NOTHING if entry.record.job.gang else sim.placer.commit_mode
                    admitted = mode.strategy.admit(entry, tasks, Decision(list(answer.claims), dict(answer.unplaced)))
                    checked.append((job_id, len(admitted.claims)))  # what the placer would commit
                return touched
            memo.refresh = refresh
    return setup


@pytest.mark.parametrize("schedulers", [SCHEDULERS, REAL_SERVICE], ids=["batch-chains", "real-service"])
def test_skipped_decisions_would_have_found_nothing(tmp_path, schedulers):
    checked: list = []
    result = replay(crowded_trace(tmp_path / "c.omt"), ReplayConfig(schedulers=schedulers, until=40.0),
                    setup=verify_skips(checked))
    assert len(checked) > 20  # the memo did skip decisions here…
    assert all(claims == 0 for _, claims in checked), [c for c in checked if c[1]]  # …that found nothing
    assert result.check["ok"], result.check["violations"]


def gang_trace(path) -> str:
    """4 machines of 4 cores; every 2 s a gang of 3-9 one-core tasks (some larger than what is
    free) and two one-task jobs of one core, all of 3 s."""
    events = [MachineAdd(0.0, machine(i)) for i in range(4)]
    for wave in range(10):
        events.append(JobSubmit(wave * 2.0, replace(batch(f"g{wave}", 3 + (wave * 5) % 7, duration=3.0), gang=True)))
        events += [JobSubmit(wave * 2.0 + 0.5, batch(f"s{wave}.{j}", 1, duration=3.0)) for j in range(2)]
    return write(path, events)


@pytest.mark.parametrize("commit", ["incremental", "all-or-nothing"])
def test_a_gang_that_places_nothing_does_not_put_smaller_requests_to_sleep(tmp_path, commit):
    """A gang (or any job under all-or-nothing commits) places nothing when only some of its
    tasks fit: its request is no shape with no room."""
    checked: list = []
    schedulers = [dict(name="b", kind="batch", seed=2, commit_mode=commit)]
    result = replay(gang_trace(tmp_path / "g.omt"), ReplayConfig(schedulers=schedulers, until=30.0),
                    setup=verify_skips(checked))
    assert checked and all(claims == 0 for _, claims in checked), [c for c in checked if c[1]]
    reference = replay(gang_trace(tmp_path / "g.omt"), ReplayConfig(schedulers=schedulers, until=30.0,
                                                                    skip_nothing_fits=False))
    assert result.schedulers[0].tasks_placed == reference.schedulers[0].tasks_placed
    assert result.check["ok"], result.check["violations"]


@pytest.mark.parametrize("skip", [True, False], ids=["memo", "no-memo"])
def test_memo_places_the_same_tasks_with_fewer_decisions(tmp_path, skip):
    trace = crowded_trace(tmp_path / "c.omt", services=False)  # kills would make timing decide what runs
    with_memo = replay(trace, ReplayConfig(schedulers=SCHEDULERS, until=60.0, skip_nothing_fits=skip))
    reference = replay(trace, ReplayConfig(schedulers=SCHEDULERS, until=60.0, skip_nothing_fits=False))
    placed = sum(s.tasks_placed for s in with_memo.schedulers)
    assert placed == sum(s.tasks_placed for s in reference.schedulers)
    assert with_memo.jobs_unscheduled == reference.jobs_unscheduled == 6  # the 5-core jobs never fit
    taken, reference_taken = (sum(s.jobs_taken for s in r.schedulers) for r in (with_memo, reference))
    assert (taken < reference_taken) is skip


@pytest.mark.parametrize("seed", range(20))
def test_request_index_finds_the_requests_that_fit_like_fits_in(seed):
    import random

    from schedulers.fit_memo import RequestIndex
    rng = random.Random(seed)

    def vector(gpu: bool) -> Resources:
        extra = {"gpu": rng.randrange(0, 3)} if gpu else {}
        return Resources.of(rng.randrange(0, 8) * 500, rng.randrange(0, 8) * 256, rng.randrange(0, 3), **extra)
    index, held = RequestIndex(), set()
    for _ in range(200):
        request = vector(rng.random() < 0.2)
        if request in held and rng.random() < 0.5:
            index.remove(request)
            held.discard(request)
        else:
            index.add(request)
            held.add(request)
        frees = [vector(rng.random() < 0.5) for _ in range(rng.randrange(0, 6))]
        expected = {r for r in held if any(r.fits_in(f) for f in frees)}
        assert set(index.fitting(frees)) == expected
        assert len(index) == len(held)
