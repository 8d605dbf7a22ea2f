"""The host contract (omega/host.py, docs/HOST.md): one assembly for the live process and the
replay, what each scheduler kind asks of its host and offers back, the live process's candidate
filters (EASY's holds, the nothing-fits memo) deciding a job once before setting it aside, the
view's declared change feed, and no probing of schedulers, committers or orders in the core."""

from __future__ import annotations

import ast
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cellstate.codec.job import decode_job_record
from cellstate.codec.records import encode_machine
from cellstate.committer import StoreCommitter
from cellstate.keys import CellKeys
from cellstate.memory.store import MemoryStore
from cellstate.model import Job, JobKind
from cellstate.replica.view import ReplicaView
from cellstate.resources import Resources
from cellstate.store import Put
from cellstate.submit import submit_jobs
from omega.host import CycleOptions, assemble
from omega.protocols import ChangeFeed
from omega.retry import RetryPolicy
from omega.runtime import RuntimeOptions, SchedulerProcess
from schedulers.chains import make_scheduler, register_kind, retry_policy_for
from schedulers.easy.scheduler import EasyHolds
from schedulers.fit_memo import NothingFitsMemo
from schedulers.plugin import PluginConfigError
from tools.fauxmaster.replay import ReplayConfig
from tools.fauxmaster.scheduler_process import SchedulerConfig, SimScheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "schedulers"))
from viewlib import FixedClock, NullSink  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL = Resources.of(1_000, 1_024, 0)
BIG = Resources.of(4_000, 1_024, 0)  # more than a machine has


def cell(machines: int = 1) -> tuple[MemoryStore, CellKeys]:
    from cellstate.model import Machine

    store, keys = MemoryStore(), CellKeys("host")
    store.txn((), [Put(keys.machine(f"m{i}"), encode_machine(Machine(id=f"m{i}", capacity=Resources.of(2_000, 4_096, 0))))
                   for i in range(machines)])
    return store, keys


def live(kind: str, store: MemoryStore, keys: CellKeys, **options) -> SchedulerProcess:
    return SchedulerProcess(make_scheduler(kind, f"{kind}-1", 0), ReplicaView(store, keys), StoreCommitter(store, keys),
                            NullSink(), retry=retry_policy_for(kind), clock=FixedClock(10.0),
                            options=RuntimeOptions(**options))


def spec(job_id: str, request: Resources, scheduler: str = "", estimate_s: float | None = None) -> Job:
    return Job(id=job_id, kind=JobKind.BATCH, tasks=1, request=request, scheduler=scheduler, estimate_s=estimate_s)


def reason(store: MemoryStore, keys: CellKeys, job_id: str) -> str:
    return decode_job_record(keys.job(job_id), store.get(keys.job(job_id)).value).reason


@pytest.mark.parametrize("kind, memo, shares", [
    ("batch", NothingFitsMemo, True), ("service", NothingFitsMemo, False), ("easy", EasyHolds, False),
    ("borg", type(None), False),
])
def test_the_live_process_is_assembled_with_what_the_scheduler_offers(kind, memo, shares):
    store, keys = cell()
    process = live(kind, store, keys)
    assert type(process.cycle.memo) is memo
    assert (process.cycle.share_machines is not None) is shares
    assert process.refused is process.cycle.refused


def test_a_live_easy_scheduler_plans_on_the_process_clock_and_its_refusals():
    store, keys = cell()
    process = live("easy", store, keys)
    scheduler = process.scheduler
    assert scheduler.clock is process.clock and scheduler.refused is process.cycle.refused


def test_the_live_host_may_leave_the_memo_out():
    store, keys = cell()
    assert live("batch", store, keys, skip_nothing_fits=False).cycle.memo is None
    assert type(live("easy", store, keys, skip_nothing_fits=False).cycle.memo) is EasyHolds  # holds are its plan


def test_the_replay_is_assembled_the_same_way():
    from tools.fauxmaster.cell import SimCell
    from tools.fauxmaster.clock import EventCore, VirtualClock

    store, keys = cell()
    core = EventCore()
    sim_cell = SimCell(store, keys, core, lambda: None)
    for kind, memo in (("batch", NothingFitsMemo), ("easy", EasyHolds), ("borg", type(None))):
        sim = SimScheduler(SchedulerConfig(f"{kind}-r", kind), store, core, VirtualClock(core), sim_cell, [f"{kind}-r"])
        assert type(sim.cycle.memo) is memo
        assert sim.placer.retry.max_attempts == retry_policy_for(kind).max_attempts
        if kind == "easy":
            assert sim.scheduler.clock is sim.clock and sim.scheduler.refused is sim.cycle.refused
            assert sim.memo.decided is None  # a replay does not decide a job only to explain its wait
    assert ReplayConfig().skip_nothing_fits


def test_live_easy_holds_a_job_only_after_deciding_it_once():
    """Live, the holds let a waiting job be decided once (its record says why it waits), then
    keep it out of the candidates until the pass starts it."""
    store, keys = cell(machines=2)
    submit_jobs(store, keys, [replace(spec("first", SMALL, "easy", 100.0), request=Resources.of(2_000, 1_024, 0)),
                              replace(spec("head", SMALL, "easy", 10.0), tasks=2,
                                      request=Resources.of(2_000, 1_024, 0))], now=1.0)
    process = live("easy", store, keys)
    assert process.work_round() == 2
    assert reason(store, keys, "head").endswith("waits for room (reserved at 110.000)")
    assert process.work_round() == 0
    assert process.cycle.memo.held == {"head"}


def test_live_memo_decides_a_job_joining_an_asleep_group_once():
    """A job whose request group sleeps (no machine has room) is decided once before it sleeps
    with the group live, so its record says why it waits; a replay leaves it out at once."""
    store, keys = cell()
    submit_jobs(store, keys, [spec("a", BIG)], now=1.0)
    process = live("batch", store, keys)
    memo = process.cycle.memo
    assert process.work_round() == 1 and reason(store, keys, "a")
    process.work_round()
    assert memo.remembers("a")
    submit_jobs(store, keys, [spec("b", BIG)], now=2.0)
    process.view.pump(0.0)
    assert process.work_round() == 1  # "b" is decided although its group sleeps
    assert reason(store, keys, "b")
    process.work_round()
    assert memo.remembers("b") and process.work_round() == 0


def test_a_replay_memo_sleeps_a_joining_job_at_once():
    store, keys = cell()
    view = ReplicaView(store, keys)
    memo = NothingFitsMemo(view, explain_waits=False)
    explaining = NothingFitsMemo(ReplicaView(store, keys), explain_waits=True)
    submit_jobs(store, keys, [spec("a", BIG)], now=1.0)
    for m in (memo, explaining):
        m.view.pump(0.0)
        m.refresh({"a"}, m.view.pending_of_classes({"batch"}))
        assert m.group_of("a") == (None if m is explaining else (4_000, 1_024, 0, ()))


def test_attach_must_answer_an_attachment():
    class Odd:
        name, kind = "odd", "odd"

        def decide(self, job, tasks, view):
            raise AssertionError("not called")

        def attach(self, host):
            return {"share_machines": None}

    store, keys = cell()
    view = ReplicaView(store, keys)
    with pytest.raises(TypeError, match=r"scheduler 'odd' \(odd\): attach must return an omega.host.Attachment"):
        assemble(Odd(), ("odd",), view, StoreCommitter(store, keys), None, FixedClock(0.0),
                 CycleOptions(RetryPolicy()))


def test_a_kind_whose_schedulers_declare_no_attach_is_refused(monkeypatch):
    from schedulers import chains

    class NoAttach:
        kind = "noattach"

        def __init__(self, name):
            self.name = name

        def decide(self, job, tasks, view):
            raise AssertionError("not called")

    monkeypatch.setattr(chains, "KINDS", dict(chains.KINDS))
    register_kind("noattach", lambda name, seed, config: NoAttach(name), retry_attempts=2)
    assert retry_policy_for("noattach", 7).max_attempts == 2
    with pytest.raises(PluginConfigError, match="lacks attach"):
        make_scheduler("noattach", "n", 0)


def test_the_kind_attempts_come_from_the_kind_registry():
    assert [retry_policy_for(k).max_attempts for k in ("batch", "service", "borg", "solver", "easy")] == [3, 8, 5, 5, 3]
    with pytest.raises(PluginConfigError, match="unknown scheduler kind 'nope'"):
        retry_policy_for("nope")


def test_the_core_keeps_no_module_global_tables():
    """No mutable module-level dict, list or set in ``omega`` (a registry there would be
    configuration hidden from the hosts: kinds and their attempts live in the policy layer)."""
    import importlib
    import pkgutil

    import omega

    tables = []
    for module in pkgutil.iter_modules(omega.__path__):
        for name, value in vars(importlib.import_module(f"omega.{module.name}")).items():
            if not name.startswith("__") and type(value) in (dict, list, set):
                tables.append(f"omega.{module.name}.{name}")
    assert tables == []


def test_the_replica_view_implements_the_declared_change_feed():
    members = [name for name in vars(ChangeFeed) if not name.startswith("_")]
    assert {"take_freed", "take_freed_machines", "take_changed_jobs", "take_changed_machines"} <= set(members)
    store, keys = cell()
    view = ReplicaView(store, keys)
    for name in members:
        assert callable(getattr(view, name)), name
    view.track_changed_jobs()
    view.track_freed_machines()
    submit_jobs(store, keys, [spec("a", SMALL)], now=1.0)
    view.pump(0.0)
    assert view.take_changed_jobs() == {"a"} and view.take_changed_jobs() == set()


def _probes(path: Path) -> list[str]:
    """``hasattr(...)`` calls and ``getattr`` with a default in ``path``: probing an object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_probing_in_the_core_or_the_hosts():
    paths = sorted((ROOT / "omega").glob("*.py")) + [ROOT / "tools/fauxmaster/scheduler_process.py",
                                                     ROOT / "schedulers/fit_memo.py"]
    assert [probe for path in paths for probe in _probes(path)] == []
