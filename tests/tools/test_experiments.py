"""``omega experiment``: every experiment runs --quick, yields its table with sane numbers and
a verdict computed from them; offers lock machines; synthetic traces are seeded."""

from __future__ import annotations

import json
import math

import pytest

from cellstate.model import Job, JobKind, Machine
from cellstate.resources import Resources
from cellstate.plan import MachineEntry
from tools.cli import main
from tools.cli.experiment import NAMES
from tools.fauxmaster.experiments.verdicts import format_cell
from tools.fauxmaster.experiments.architectures import CodePath, MultiPath, OfferBroker
from tools.fauxmaster.experiments.catalogue import QUICK, names, run_experiment
from tools.fauxmaster.experiments.runs import Overrides, RunFigures, run_case
from tools.fauxmaster.experiments.synthetic import SyntheticSpec, synthetic_events, write_synthetic_trace
from tools.fauxmaster.experiments.verdicts import (
    MIN_EVENTS, clearly_larger, conflict_setup_warnings, counts_conclusive, verdict_of,
)
from tools.fauxmaster.metrics import SchedulerMetrics
from tools.fauxmaster.scheduler_process import SchedulerConfig
from tools.trace.events import JobKill, JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter, read_trace

EXPECTED_COLUMNS = {
    "architectures": {"architecture", "batch_wait_first", "batch_wait_placed", "batch_unscheduled", "busyness",
                      "conflict_fraction"},
    "tjob-sweep": {"t_job", "service_busyness", "service_conflict_fraction", "batch_conflict_fraction"},
    "conflict-modes": {"mode", "conflict_fraction", "failed_txns", "stale_retries", "busyness"},
    "commit-modes": {"mode", "conflict_fraction", "failed_txns", "stale_retries", "busyness"},
    "batch-scaling": {"schedulers", "load", "batch_busyness", "unscheduled_fraction", "saturated"},
}
ROWS = {"architectures": 3, "tjob-sweep": len(QUICK.tjob_sweep), "conflict-modes": 2, "commit-modes": 2,
        "batch-scaling": 2 * len(QUICK.load_factors)}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("experiments")
    return {name: run_experiment(name, quick=True, workdir=str(workdir)) for name in names()}


def test_the_cli_lists_every_experiment():
    assert tuple(names()) == NAMES


@pytest.mark.parametrize("name", NAMES, ids=NAMES)
def test_each_experiment_yields_its_table_and_a_computed_verdict(reports, name):
    report = reports[name]
    keys = {c.key for c in report.columns}
    assert EXPECTED_COLUMNS[name] <= keys
    assert len(report.rows) == ROWS[name]
    assert all(c.key in row for row in report.rows for c in report.columns)
    assert report.runs_ok
    assert isinstance(report.verdict.reproduced, bool)
    expected = ("direction REPRODUCED" if report.verdict.reproduced else "direction INCONCLUSIVE"
                if report.verdict.inconclusive else "direction NOT reproduced")
    assert report.verdict.text.startswith(expected)
    assert not (report.verdict.reproduced and report.verdict.inconclusive)
    assert report.verdict.warnings == ()  # the synthetic traces have both kinds of jobs
    assert report.paper and report.setup


@pytest.mark.parametrize("name", NAMES, ids=NAMES)
def test_numbers_are_sane(reports, name):
    for row in reports[name].rows:
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value) and value >= 0, (key, value)
            if "busyness" in key and isinstance(value, float):
                assert value <= 1.0, (key, value)
            if key.endswith("unscheduled_fraction"):
                assert value <= 1.0


def test_architectures_show_their_mechanisms(reports):
    rows = {r["architecture"]: r for r in reports["architectures"].rows}
    assert rows["monolithic"]["busyness"].startswith("monolithic ")  # one scheduler for everything
    assert rows["monolithic"]["conflict_fraction"] == 0.0  # nobody to conflict with but the cell
    assert rows["two-level"]["offers"] > 0
    assert 0 <= rows["two-level"]["empty_offers"] <= rows["two-level"]["offers"]


def test_the_sweep_busies_the_service_scheduler(reports):
    rows = reports["tjob-sweep"].rows
    assert rows[-1]["service_busyness"] > rows[0]["service_busyness"]  # 100x the decision time


def test_offers_lock_machines_to_one_holder():
    view = _View([Machine(f"m{i}", Resources(4000, 8192)) for i in range(4)]
                 + [Machine("full", Resources(1000, 1024), allocated=Resources(1000, 1024))])
    broker = OfferBroker()
    first = broker.offer("service", view)
    assert first == {"m0", "m1", "m2", "m3"}  # every free machine; the full one is not offered
    assert broker.offer("batch", view) == frozenset()  # locked to the service scheduler
    broker.release("service")
    assert broker.offer("batch", view) == first
    assert (broker.stats.offers, broker.stats.empty) == (3, 1)


def test_an_offer_share_slices_and_rotates():
    view = _View([Machine(f"m{i}", Resources(4000, 8192)) for i in range(4)])
    broker = OfferBroker(share=0.5)
    a = broker.offer("x", view)
    broker.release("x")
    b = broker.offer("x", view)
    assert len(a) == len(b) == 2 and a != b


@pytest.mark.parametrize("share", [0, 1.5], ids=["zero", "above-one"])
def test_a_bad_offer_share_is_refused(share):
    with pytest.raises(ValueError, match="offer share"):
        OfferBroker(share)


def test_monolithic_needs_exactly_one_scheduler(tmp_path):
    trace = write_synthetic_trace(tmp_path / "t.omt", SyntheticSpec(machines=4, duration_s=5.0))
    paths = {JobKind.BATCH: CodePath("batch", 0.1, 0.005)}
    two = [SchedulerConfig("a", "batch", jobs="all"), SchedulerConfig("b", "batch", jobs="all")]
    with pytest.raises(ValueError, match="exactly one scheduler"):
        run_case(trace, two, "monolithic", multipath=MultiPath(paths))


def test_synthetic_traces_are_seeded_and_ordered(tmp_path):
    spec = SyntheticSpec(machines=3, duration_s=400.0, service_lifetime_s=50.0)
    events = synthetic_events(spec)
    assert events == synthetic_events(spec)
    assert [type(e) for e in events[:3]] == [MachineAdd] * 3
    times = [e.t for e in events]
    assert times == sorted(times)
    submitted = {}
    for e in events:
        if isinstance(e, JobSubmit):
            submitted[e.job.id] = e.t
        elif isinstance(e, JobKill):
            assert submitted[e.job_id] <= e.t and e.job_id.split("-")[1].startswith("s")
    assert any(isinstance(e, JobKill) for e in events)
    header, reader = read_trace(write_synthetic_trace(tmp_path / "s.omt.gz", spec))
    with reader:
        assert len(list(reader)) == len(events)
    assert "3 machines" in header.source


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="vibes"), "unknown experiment 'vibes'"),
    (dict(name="architectures", trace="/nonexistent/x.omt"), "does not exist"),
], ids=["unknown-name", "missing-trace"])
def test_bad_input_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_experiment(**kwargs)


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "arch.json"
    trace = write_synthetic_trace(tmp_path / "given.omt", QUICK.spec)
    assert main(["experiment", "conflict-modes", "--quick", "--trace", str(trace), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "conflict-modes" in printed and "paper:" in printed and "direction" in printed
    data = json.loads(out.read_text())
    assert data["name"] == "conflict-modes" and len(data["rows"]) == 2
    assert data["verdict"]["text"].startswith("direction")
    assert str(trace) in data["setup"]


@pytest.mark.parametrize("value, fmt, text", [
    (0.12345, ".3f", "0.123"), (3, "", "3"), ("yes", ".2f", "yes"), (None, ".2f", ""), (0.25, ".1%", "25.0%"),
], ids=["float", "int", "text", "missing", "percent"])
def test_format_cell(value, fmt, text):
    assert format_cell(value, fmt) == text


class _View:
    """A tiny CellView over fixed machines."""

    def __init__(self, machines):
        self._entries = {m.id: MachineEntry(m, 1) for m in machines}

    def machines(self):
        return iter(self._entries.values())

    def machine_count(self):
        return len(self._entries)


def test_overrides_swap_batch_kinds_and_set_every_queue_order():
    overrides = Overrides("borg", "drf", {"alice": 2.0})
    batch, service = (overrides.apply(c) for c in [SchedulerConfig("b", "batch"), SchedulerConfig("s", "service")])
    assert (batch.kind, batch.jobs, batch.order, batch.drf_weights) == ("borg", "batch", "drf", {"alice": 2.0})
    assert (service.kind, service.jobs, service.order) == ("service", "service", "drf")
    paths = MultiPath({JobKind.BATCH: CodePath("batch", 0.1, 0.005), JobKind.SERVICE: CodePath("service", 1, 0)})
    assert paths.with_kind("batch", "solver").paths[JobKind.BATCH] == CodePath("solver", 0.1, 0.005)


@pytest.mark.parametrize("overrides, message", [
    (dict(batch_kind="quantum"), "batch kind must be one of"),
    (dict(order="lottery"), "lottery"),
    (dict(order="fair", drf_weights={"alice": 2.0}), "drf"),
], ids=["unknown-kind", "unknown-order", "weights-without-drf"])
def test_bad_overrides_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        Overrides(**overrides)


@pytest.mark.parametrize("kind", ["borg"])
def test_an_experiment_runs_with_another_batch_kind_and_drf(tmp_path, capsys, kind):
    out = tmp_path / "modes.json"
    assert main(["experiment", "conflict-modes", "--quick", "--batch-kind", kind, "--order", "drf",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert f"batch schedulers of kind {kind}, queue order drf" in data["setup"]
    assert len(data["rows"]) == 2 and data["runs_ok"]


def test_a_bad_batch_kind_exits_with_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", "conflict-modes", "--quick", "--batch-kind", "quantum"])
    assert exit_.value.code == 2
    assert "--batch-kind" in capsys.readouterr().err


@pytest.mark.parametrize("a, b, larger", [
    (0.0149, 0.0147, False), (0.109, 0.1, False), (0.111, 0.1, True), (4.2, 1.0, True), (0.16, 0.0, True),
    (0.0, 0.0, False), (0.1, 0.2, False),
], ids=["one-per-cent", "nine-per-cent", "eleven-per-cent", "paper-sized", "from-zero", "both-zero", "smaller"])
def test_a_direction_needs_a_clear_effect(a, b, larger):
    assert clearly_larger(a, b) is larger


def test_a_trace_of_the_initial_state_only_is_refused(tmp_path, capsys):
    trace = tmp_path / "t0.omt"
    with TraceWriter(trace, TraceHeader("test", "2024-01-01T00:00:00Z", "4 cores")) as writer:
        writer.write(MachineAdd(0.0, Machine("m1", Resources(4000, 8192))))
        writer.write(JobSubmit(0.0, Job("j", JobKind.BATCH, 2, Resources(1000, 512))))
    with pytest.raises(SystemExit) as info:
        main(["experiment", "conflict-modes", "--trace", str(trace)])
    assert info.value.code == 2 and "all 2 events are at t = 0" in capsys.readouterr().err


@pytest.mark.parametrize("a, n_a, b, n_b, conclusive", [
    (2, 25_800, 0, 25_800, False),      # the issue's case: 2 conflicts against 0 is noise
    (0, 25_800, 0, 25_800, False),      # 0 against 0: nothing to tell either way
    (MIN_EVENTS - 1, 100, 0, 100, False),  # below MIN_EVENTS together
    (30, 1000, 10, 1000, True),         # 0.03 vs 0.01: 20 apart, noise sqrt(40) ~ 6.3 -> over 2 sigma
    (55, 1000, 45, 1000, False),        # 10 apart, noise sqrt(100) = 10 -> within 2 sigma
    (20, 2000, 5, 1000, False),         # 0.01 vs 0.005: 0.005 apart, noise 0.0032 -> within 2 sigma
    (40, 1000, 10, 1000, True),
], ids=["two-vs-zero", "zero-vs-zero", "under-min-events", "clear", "within-noise", "rates-within-noise",
        "rates-clear"])
def test_a_comparison_of_counts_needs_enough_events(a, n_a, b, n_b, conclusive):
    assert counts_conclusive(a, n_a, b, n_b) is conclusive


@pytest.mark.parametrize("outcomes, state", [
    (["yes"], "REPRODUCED"), (["yes", "inconclusive"], "INCONCLUSIVE"), (["inconclusive"], "INCONCLUSIVE"),
    (["no", "inconclusive"], "NOT reproduced"), (["yes", "no"], "NOT reproduced")])
def test_verdict_states(outcomes, state):
    verdict = verdict_of(outcomes, "d")
    assert verdict.text == f"direction {state}: d"
    assert verdict.reproduced is (state == "REPRODUCED") and verdict.inconclusive is (state == "INCONCLUSIVE")


def _metrics(name: str, transactions: int) -> SchedulerMetrics:
    return SchedulerMetrics(name, "batch", "resource-fit", "incremental", 0.0, 0.0, transactions, transactions,
                            0, 0, 0.0, 1, transactions, 0, 0.0)


@pytest.mark.parametrize("schedulers, warned", [
    ([("b", 10)], "one scheduler only"), ([("b", 10), ("s", 0)], "only b committed anything"),
    ([("b", 10), ("s", 3)], None)], ids=["one-scheduler", "one-active", "two-active"])
def test_a_conflict_setup_that_cannot_produce_the_effect_is_warned(schedulers, warned):
    f = RunFigures({}, [_metrics(n, t) for n, t in schedulers], 10.0, 1.0, True)
    warnings = conflict_setup_warnings("run", f)
    assert (warnings == []) if warned is None else (len(warnings) == 1 and warned in warnings[0])


def test_conflict_modes_on_a_trace_without_service_jobs_warns_and_prints(tmp_path, capsys):
    trace = tmp_path / "batch-only.omt"
    with TraceWriter(trace, TraceHeader("test", "2024-01-01T00:00:00Z", "4 cores")) as writer:
        for i in range(4):
            writer.write(MachineAdd(0.0, Machine(f"m{i}", Resources(4000, 8192))))
        for j in range(6):
            writer.write(JobSubmit(float(j), Job(f"j{j}", JobKind.BATCH, 2, Resources(1000, 512), duration_s=2.0)))
    assert main(["experiment", "conflict-modes", "--quick", "--trace", str(trace)]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert "only batch committed anything" in printed and "cannot produce the effect" in printed
    assert "direction INCONCLUSIVE" in printed and "fewer than 10 conflicts" in printed
