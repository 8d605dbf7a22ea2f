"""ServiceScheduler: Diego ordering, zone then machine spread, least loaded, gang, reasons."""

from __future__ import annotations

from collections import Counter

import pytest
from viewlib import DictView, job, machine

from cellstate.model import JobKind
from cellstate.resources import Resources
from schedulers.service.scheduler import ServiceScheduler, order_batch

SERVICE = JobKind.SERVICE


def three_zones(per_zone: int = 3) -> DictView:
    return DictView(machine(f"{z}-m{i}", zone=z) for z in "abc" for i in range(per_zone))


def zones_of(view, decision) -> Counter:
    return Counter(view.machine(c.machine_id).machine.zone for c in decision.claims)


def test_spreads_six_tasks_over_three_zones_two_each():
    view = three_zones()
    entry = view.add_job(job("web", tasks=6, kind=SERVICE))
    d = ServiceScheduler("s").decide(entry, list(range(6)), view)
    assert d.unplaced == {}
    assert zones_of(view, d) == {"a": 2, "b": 2, "c": 2}
    assert len({c.machine_id for c in d.claims}) == 6  # then across machines within a zone


def test_counts_existing_allocs_when_spreading():
    view = three_zones()
    view.add_job(job("web", tasks=6, kind=SERVICE))
    view.place("web", 0, "a-m0")
    view.place("web", 1, "a-m1")
    d = ServiceScheduler("s").decide(view.job("web"), [2, 3, 4, 5], view)
    assert zones_of(view, d) == {"b": 2, "c": 2}


def test_prefers_the_least_loaded_machine_within_a_zone():
    view = DictView([machine("busy", zone="a", allocated=Resources.of(3000, 6000)),
                     machine("idle", zone="a"), machine("half", zone="a", allocated=Resources.of(2000, 4000))])
    entry = view.add_job(job("web", tasks=1, kind=SERVICE))
    d = ServiceScheduler("s").decide(entry, [0], view)
    assert [c.machine_id for c in d.claims] == ["idle"]


def test_respects_different_machine():
    view = DictView([machine("m1", zone="a"), machine("m2", zone="b"), machine("m3", zone="a")])
    entry = view.add_job(job("web", tasks=4, kind=SERVICE, different_machine=True))
    d = ServiceScheduler("s").decide(entry, [0, 1, 2, 3], view)
    assert sorted(c.machine_id for c in d.claims) == ["m1", "m2", "m3"]
    assert d.unplaced == {3: "no machine fits: different_machine: job already on machine (3 machines)"}


def test_never_over_capacity_and_reason_names_resource():
    view = DictView([machine("m1", cpu=1000), machine("m2", cpu=500)])
    entry = view.add_job(job("web", tasks=5, cpu=400, kind=SERVICE))
    d = ServiceScheduler("s").decide(entry, list(range(5)), view)
    assert Counter(c.machine_id for c in d.claims) == {"m1": 2, "m2": 1}
    assert d.unplaced == {3: "no machine fits: resources_fit: cpu (2 machines)",
                          4: "no machine fits: resources_fit: cpu (2 machines)"}


@pytest.mark.parametrize("tasks,placed", [(9, 9), (10, 0)], ids=["all-fit", "one-too-many"])
def test_gang_all_or_nothing(tasks, placed):
    view = three_zones()  # 9 machines, 1 task each
    entry = view.add_job(job("g", tasks=tasks, cpu=4000, kind=SERVICE, gang=True))
    d = ServiceScheduler("s").decide(entry, list(range(tasks)), view)
    assert len(d.claims) == placed
    if placed == 0:
        assert set(d.unplaced) == set(range(tasks))
        assert all(r.startswith(f"gang: not all {tasks} tasks fit; task 9: no machine fits: resources_fit: cpu")
                   for r in d.unplaced.values())


def test_failed_gang_releases_its_reservations_for_later_jobs():
    view = DictView([machine("m1", cpu=1000), machine("m2", cpu=1000)])
    gang = view.add_job(job("a-gang", tasks=3, cpu=1000, memory=1024, kind=SERVICE, gang=True))
    small = view.add_job(job("b-small", tasks=2, cpu=1000, memory=64, kind=SERVICE))
    out = ServiceScheduler("s").decide_batch([(gang, [0, 1, 2]), (small, [0, 1])], view)
    assert out["a-gang"].claims == []
    assert sorted(c.machine_id for c in out["b-small"].claims) == ["m1", "m2"]


def _entries(view, specs):
    return [(view.add_job(s), list(range(s.tasks))) for s in specs]


def test_order_batch_follows_diego():
    view = DictView()
    batch = _entries(view, [
        job("svc-small", tasks=3, memory=100, kind=SERVICE),
        job("svc-big", tasks=2, memory=900, kind=SERVICE),
        job("task-mid", tasks=1, memory=500, kind=JobKind.BATCH),
        job("task-huge", tasks=1, memory=2000, kind=JobKind.BATCH),
    ])
    order = [(e.id, t) for e, t in order_batch(batch)]
    assert order == [
        ("svc-big", 0), ("svc-small", 0),            # first instances, size descending
        ("task-huge", 0), ("task-mid", 0),           # then tasks, size descending
        ("svc-big", 1), ("svc-small", 1),            # then remaining instances by index, size
        ("svc-small", 2),
    ]


def test_order_batch_a_running_service_has_no_first_instance():
    view = DictView([machine("m")])
    view.add_job(job("old", tasks=2, memory=900, kind=SERVICE))
    view.place("old", 0, "m")
    new = view.add_job(job("new", tasks=2, memory=100, kind=SERVICE))
    order = [(e.id, t) for e, t in order_batch([(view.job("old"), [1]), (new, [0, 1])])]
    assert order == [("new", 0), ("old", 1), ("new", 1)]


@pytest.mark.parametrize("kind, live", [(SERVICE, False), (SERVICE, True), (JobKind.BATCH, False)],
                         ids=["service", "running-service", "batch-kind"])
def test_order_batch_of_one_job_is_its_order_among_others(kind, live):
    view = DictView([machine("m")])
    view.add_job(job("j", tasks=6, memory=300, kind=kind))
    if live:
        view.place("j", 2, "m")
    entry = view.job("j")
    tasks = [5, 0, 3, 1, 4] if live else [5, 0, 3, 2, 1, 4]
    other = view.add_job(job("k", tasks=2, memory=600, kind=SERVICE))
    among = [t for e, t in order_batch([(entry, tasks), (other, [0, 1])]) if e.id == "j"]
    assert [t for _, t in order_batch([(entry, tasks)])] == among == sorted(tasks)


def test_decide_batch_places_first_instances_before_filling_up():
    view = DictView([machine("m1", cpu=1000), machine("m2", cpu=1000)])
    specs = [job(f"svc{i}", tasks=2, cpu=1000, kind=SERVICE) for i in range(2)]
    out = ServiceScheduler("s").decide_batch(_entries(view, specs), view)
    assert [len(out[f"svc{i}"].claims) for i in range(2)] == [1, 1]
    assert set(out["svc0"].unplaced) == {1} and set(out["svc1"].unplaced) == {1}


def test_decide_batch_rejects_a_job_listed_twice():
    view = DictView()
    entry = view.add_job(job("j", tasks=1))
    with pytest.raises(ValueError, match="listed twice"):
        ServiceScheduler("s").decide_batch([(entry, [0]), (entry, [0])], view)
