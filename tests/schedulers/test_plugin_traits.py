"""Fast paths ask plugins' declared traits, not their names or types: a resource filter written
by a user (another class than ``ResourcesFit``, another name) that declares what
``resources_fit`` declares keeps the indexed paths of the service search and the batch free
index, and places exactly as the built-in one; without the declaration it takes the slow path."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from test_sched_service_fast import random_cell, random_job

import schedulers.batch as batch_module
import schedulers.service.scheduler as service_module
from schedulers import chains, registry
from schedulers.api import ROOM, FilterTraits, Verdict, make_scheduler, register_filter
from schedulers.pipeline import Pipeline
from schedulers.registry import make_filter, make_scorer
from schedulers.service.scheduler import ServiceScheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from test_fauxmaster_fit_memo import crowded_trace  # noqa: E402

from schedulers.fit_memo import memo_applies  # noqa: E402
from tools.fauxmaster.replay import ReplayConfig, replay  # noqa: E402


class UserFit:
    """A user's resource filter: the request must fit the free amounts, naming the first short
    resource (cpu, memory, disk, then extras); never when the capacity itself is short."""

    name = "user_fit"
    reads = frozenset({"request"})
    traits = FilterTraits(monotone_in_free=True, resource_fit=True, lifted_by=frozenset({ROOM}))

    def fits(self, job, machine, free, placed_here):
        request = job.request
        asked = [("cpu", request.cpu), ("memory", request.memory), ("disk", request.disk), *request.extra]
        for resource, amount in asked:
            if amount > free.get(resource):
                if amount > machine.capacity.get(resource):
                    return Verdict.never(self.name, resource)
                return Verdict.unfit(self.name, resource)
        return Verdict.fit(self.name)


class UndeclaredFit(UserFit):
    """The same verdicts, no declaration: the fast paths cannot know."""

    name = "undeclared_fit"
    traits = None


def service_chain(fit) -> Pipeline:
    filters = [make_filter("machine_state"), make_filter("different_machine"), make_filter("max_per_machine"), fit,
               make_filter("constraints")]
    return Pipeline(filters, [[(make_scorer("zone_spread"), 1.0)], [(make_scorer("least_loaded"), 1.0)]])


def renamed(decision, name: str):
    return decision.claims, {t: why.replace(name, "resources_fit") for t, why in decision.unplaced.items()}


def test_a_declared_user_fit_keeps_the_service_index(monkeypatch):
    searches = []
    original = service_module.SpreadSearch

    def counting(*args):
        searches.append(args)
        return original(*args)
    monkeypatch.setattr(service_module, "SpreadSearch", counting)
    for seed in range(25):
        rng = random.Random(seed)
        view = random_cell(rng)
        jobs = [random_job(rng, f"j{i}", view) for i in range(rng.randint(1, 4))]
        batch = [(e, e.record.pending_tasks()) for e in jobs]
        user = ServiceScheduler("user", pipeline=service_chain(UserFit()))
        builtin = ServiceScheduler("builtin", pipeline=service_chain(make_filter("resources_fit")))
        assert not user.exhaustive and isinstance(user.chain.fits, UserFit)
        before = len(searches)
        got, want = user.decide_batch(batch, view), builtin.decide_batch(batch, view)
        assert len(searches) > before  # the user chain's decision went through the index's search
        for e in jobs:
            assert renamed(got[e.id], "user_fit") == renamed(want[e.id], "resources_fit"), f"seed {seed}"


def test_an_undeclared_fit_takes_the_full_scan():
    assert ServiceScheduler("u", pipeline=service_chain(UndeclaredFit())).exhaustive
    assert not batch_module.chain_applies(service_chain(UndeclaredFit()).filters)
    assert batch_module.chain_applies(service_chain(UserFit()).filters)


@pytest.fixture
def user_fit_registered():
    saved = dict(chains.KINDS), dict(registry.FILTERS), dict(registry.SCORERS)
    register_filter("user_fit", lambda args=None: UserFit())
    register_filter("undeclared_fit", lambda args=None: UndeclaredFit())
    yield
    for table, old in zip((chains.KINDS, registry.FILTERS, registry.SCORERS), saved):
        table.clear()
        table.update(old)


def batch_options(fit: str) -> dict:
    names = ["machine_state", "different_machine", "max_per_machine", fit, "constraints"]
    return {"filters": [{"name": n} for n in names], "scorers": [{"name": "least_loaded"}]}


def test_a_declared_user_fit_keeps_the_batch_free_index(tmp_path, monkeypatch, user_fit_registered):
    trace = crowded_trace(tmp_path / "c.omt")
    built = []
    original = batch_module.FreeIndex

    def recording(*args):
        built.append(args)
        return original(*args)
    monkeypatch.setattr(batch_module, "FreeIndex", recording)

    def run(fit: str):
        schedulers = [dict(name="b", kind="batch", seed=2, options=batch_options(fit)),
                      dict(name="s", kind="batch", jobs="service", seed=5, options=batch_options(fit))]
        result = replay(trace, ReplayConfig(schedulers=schedulers, until=40.0))
        allocs = {kv.key: kv.value for kv in result.store.range(result.keys.prefix + "allocs/").kvs}
        figures = result.to_dict(include_wall=False)
        figures.pop("config")
        return figures, allocs

    user = run("user_fit")
    assert built  # the user chain's full scans went through the free index
    built.clear()
    assert user == run("resources_fit")  # the same placements, figures and allocations
    assert built
    assert user[1]  # something was placed
    built.clear()
    assert run("undeclared_fit")[1]  # the slow path places too (the nothing-fits memo is off: not the same times)
    assert not built  # without the index


def test_the_nothing_fits_memo_asks_the_declarations(user_fit_registered):
    assert memo_applies(make_scheduler("batch", "b", 0, batch_options("user_fit")))
    assert not memo_applies(make_scheduler("batch", "b", 0, batch_options("undeclared_fit")))
    assert not memo_applies(make_scheduler("borg", "g", 0))
