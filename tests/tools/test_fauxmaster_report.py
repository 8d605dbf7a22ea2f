"""The replay report: time axes in the unit the span fits, wait CDFs that keep the jobs never placed,
the conflict fraction over time per scheduler, and plots over time averaged over bins."""

from __future__ import annotations

import json

import pytest
from fauxmaster_traces import batch, machine, write

from tools.cli import main
from tools.fauxmaster.metrics import cdf_steps, windowed_fractions
from tools.fauxmaster.replay import MAX_SAMPLES, ReplayConfig, replay
from tools.fauxmaster.report.plots import binned_means, time_unit
from tools.fauxmaster.report.result import run_of
from tools.trace.events import JobKill, JobSubmit, MachineAdd, TaskPlaced

ONE = [dict(name="b", kind="batch")]


def cdf_trace(path) -> str:
    """2 machines of 4 cores. t = 0: "rec" placed whole on m0 by the recorded state, "ok1" for the
    scheduler; "huge" (9 cores: fits nowhere) at 1 s, still pending at the end; "doomed" (9 cores) at
    2 s, killed at 5 s unplaced; "ok2" at 3 s."""
    events = [MachineAdd(0.0, machine(i)) for i in range(2)]
    events += [JobSubmit(0.0, batch("rec", 2, duration=50.0)), JobSubmit(0.0, batch("ok1", 1, duration=5.0)),
               TaskPlaced(0.0, "rec", 0, "m0"), TaskPlaced(0.0, "rec", 1, "m0"),
               JobSubmit(1.0, batch("huge", 1, cpu=9000)), JobSubmit(2.0, batch("doomed", 1, cpu=9000)),
               JobSubmit(3.0, batch("ok2", 2, duration=5.0)), JobKill(5.0, "doomed")]
    return write(path, events)


@pytest.mark.parametrize("span, unit", [
    (60.0, "s"), (180.0, "s"), (20 * 60.0, "min"), (5_616.0, "min"), (3 * 3600.0, "min"), (3 * 3600.0 + 1, "h"),
    (72 * 3600.0, "h"), (149 * 86_400.0, "days"),
])
def test_the_time_axis_unit_fits_the_span(span, unit):
    seconds, label = time_unit(span)
    assert label == unit and seconds == {"s": 1.0, "min": 60.0, "h": 3600.0, "days": 86_400.0}[unit]


def test_cdf_steps_end_at_the_share_that_got_there():
    assert cdf_steps([3.0, 1.0, 2.0], 5) == {"waits_s": [1.0, 2.0, 3.0], "fractions": [0.2, 0.4, 0.6]}
    assert cdf_steps([], 4) == {"waits_s": [], "fractions": []}
    capped = cdf_steps([float(i) for i in range(1000)], 2000, max_points=4)  # ranks 250, 500, 750, 1000
    assert capped == {"waits_s": [249.0, 499.0, 749.0, 999.0], "fractions": [0.125, 0.25, 0.375, 0.5]}
    with pytest.raises(ValueError, match="population 1 < 2 waits"):
        cdf_steps([1.0, 2.0], 1)


def test_windowed_fractions_from_cumulative_counts():
    # cumulative: transactions, failed (of which conflicts) at 5 samples
    tx, failed, conflicts = [0, 4, 4, 10, 12], [0, 1, 1, 3, 4], [0, 1, 1, 2, 2]
    # windows: (0,1] 1 conflict / 3 ok; (1,2] nothing succeeded; (2,3] 1 / 4; (3,4] 0 / 1
    assert windowed_fractions(tx, failed, conflicts) == ([1, 2, 3, 4], [1 / 3, None, 0.25, 0.0])
    # merged two by two: (0,2] 1 / 3, (2,4] 1 / 5
    assert windowed_fractions(tx, failed, conflicts, step=2) == ([2, 4], [1 / 3, 0.2])
    # step 3: (0,3] 2 / 7, then the rest (3,4]
    assert windowed_fractions(tx, failed, conflicts, step=3) == ([3, 4], [2 / 7, 0.0])
    assert windowed_fractions([5], [0], [0]) == ([], [])


def test_the_wait_cdf_keeps_the_jobs_never_placed(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["replay", cdf_trace(tmp_path / "t.omt"), "--schedulers", "b:batch", "--until", "1200",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    cdf = json.loads(out.read_text())["wait_cdf"]
    # 5 submitted, "rec" placed whole at t = 0 by the recorded state: 4 for the scheduler
    assert (cdf["jobs"], cdf["recorded_at_t0"]) == (4, 1)
    placed = cdf["to_placed"]
    assert (placed["never"], placed["pending_at_end"], placed["ended_unplaced"]) == (2, 1, 1)
    assert placed["fractions"] == [0.25, 0.5] and len(placed["waits_s"]) == 2  # ends at 2 of 4, not at 1
    # "doomed" has the request "huge" found no room for: the nothing-fits memo never decides it
    first = cdf["to_first_attempt"]
    assert first["never"] == 1 and first["fractions"] == [0.25, 0.5, 0.75]
    assert ("of 4 jobs to place: 1 never attempted, 2 never fully placed (1 pending at the end, "
            "1 ended or killed before)") in printed


def test_the_conflict_fraction_over_time_is_sampled_with_utilization(tmp_path):
    from fauxmaster_traces import small_cell_trace

    config = ReplayConfig(schedulers=[dict(name="a", kind="batch", conflict_mode="sequence", seed=1),
                                      dict(name="b", kind="batch", conflict_mode="sequence", seed=2)],
                          sample_every_s=0.5, skip_nothing_fits=False)
    result = replay(small_cell_trace(tmp_path / "t.omt", machines=2, jobs=60, tasks=3, every=0.1, duration=0.5),
                    config)
    over_time = result.to_dict(include_wall=False)["conflicts_over_time"]
    assert over_time["t"] == [u.t for u in result.utilization]
    for s in result.schedulers:
        counts = over_time["schedulers"][s.name]
        assert (counts["transactions"][-1], counts["failed"][-1], counts["conflicts"][-1]) == (
            s.transactions, s.failed_transactions, s.conflict_transactions)
        assert counts["fraction"][0] is None and len(counts["fraction"]) == len(over_time["t"])
        assert all(a <= b for a, b in zip(counts["transactions"], counts["transactions"][1:]))
    assert sum(s.conflict_transactions for s in result.schedulers) > 0  # the plot has something to show


def test_conflict_counts_are_thinned_with_the_utilization_samples(tmp_path):
    # 1 s asked over 10,000 s: thinned twice, to every 4 s (test_fauxmaster_sampling)
    trace = write(tmp_path / "t.omt", [MachineAdd(0.0, machine(0)), JobSubmit(1.0, batch("a", 1, duration=5.0)),
                                       JobSubmit(10_000.0, batch("z", 1, duration=5.0))])
    result = replay(trace, ReplayConfig(schedulers=ONE, sample_every_s=1.0))
    assert result.utilization_interval_s == 4.0
    over_time = result.conflicts_over_time
    assert len(over_time["t"]) == len(result.utilization) <= 2 * MAX_SAMPLES + 1
    assert over_time["t"] == [u.t for u in result.utilization]
    assert over_time["schedulers"]["b"]["transactions"][-1] == result.schedulers[0].transactions


def _figure():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    return plt.figure()


def test_the_plots_label_the_never_placed_and_use_the_span_unit(tmp_path):
    from tools.fauxmaster.report import plots

    result = replay(cdf_trace(tmp_path / "t.omt"), ReplayConfig(schedulers=ONE, until=1200.0))
    run = run_of(result)
    fig = _figure()
    plots.draw_wait_cdf(fig, [run])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["to first attempt: 3 jobs, 1 never",
                      "to fully placed: 2 jobs, 2 never (1 pending at the end, 1 ended unplaced)"]
    ys = fig.axes[0].get_lines()[1].get_ydata()
    assert max(ys) == 0.5  # the placed curve stops at 2 of 4
    fig = _figure()
    plots.draw_utilization(fig, [run])
    assert fig.axes[1].get_xlabel() == "virtual time (min)"  # a 20-minute run is not drawn in hours
    assert max(fig.axes[0].get_lines()[0].get_xdata()) == 20.0
    fig = _figure()
    plots.draw_conflicts(fig, [run])
    assert fig.axes[0].get_xlabel() == "virtual time (min)"
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["b (0.0000 overall)"]
    import matplotlib.pyplot as plt

    plt.close("all")


def test_the_html_report_has_every_plot_and_the_counts(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    assert main(["replay", cdf_trace(tmp_path / "t.omt"), "--schedulers", "b:batch", "--until", "1200",
                 "--html", str(out)]) == 0
    page = (out / "index.html").read_text()
    for name in ("utilization.png", "wait_cdf.png", "busyness.png", "conflicts.png"):
        assert f'<img src="{name}"' in page and (out / name).read_bytes()[:4] == b"\x89PNG"
    assert ("Of the 4 jobs the schedulers had to place: 1 never attempted, 2 never fully placed (1 still pending "
            "at the end, 1 ended or killed before); 1 placed whole by the recorded t = 0 state are not in it.") in page
    assert json.loads((out / "result.json").read_text())["wait_cdf"]["jobs"] == 4


@pytest.mark.parametrize("n, max_points, sizes", [
    (5, 10, [1] * 5), (10, 10, [1] * 10), (11, 10, [2] * 5 + [1]), (2500, 1000, [3] * 833 + [1]),
], ids=["fewer", "exactly", "one-more", "long"])
def test_binned_means_average_consecutive_samples(n, max_points, sizes):
    t = [float(i) for i in range(n)]
    values = [float(i * i) for i in range(n)]
    bt, (bv,) = binned_means(t, [values], max_points)
    assert len(bt) == len(sizes) <= max_points
    start = 0
    for i, size in enumerate(sizes):
        assert bt[i] == pytest.approx(sum(t[start:start + size]) / size)
        assert bv[i] == pytest.approx(sum(values[start:start + size]) / size)
        start += size


def test_binned_means_of_nothing():
    assert binned_means([], [[], []]) == ([], [[], []])


def gpu_trace(path) -> str:
    """m0 has 2 gpus, m1 none. "g" (1 gpu) recorded on m0 at t = 0, ends at 10 s; "g2" (2 tasks of 1 gpu)
    at 1 s: one task fits until "g" ends; m0 fails at 20 s."""
    from cellstate.model import Job, JobKind, Machine
    from cellstate.resources import Resources
    from tools.trace.events import MachineFail

    def job(job_id, tasks, duration):
        return Job(job_id, JobKind.BATCH, tasks, Resources.of(1000, 512, gpu=1), duration_s=duration)

    events = [MachineAdd(0.0, Machine("m0", Resources.of(4000, 8192, 10_000, gpu=2))),
              MachineAdd(0.0, Machine("m1", Resources(4000, 8192, 10_000))),
              JobSubmit(0.0, job("g", 1, 10.0)), TaskPlaced(0.0, "g", 0, "m0"),
              JobSubmit(1.0, job("g2", 2, 30.0)), MachineFail(20.0, "m0")]
    return write(path, events)


def test_extra_resources_are_sampled_summarized_and_reported(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["replay", gpu_trace(tmp_path / "t.omt"), "--schedulers", "b:batch", "--until", "25",
                 "--sample-every", "1", "--json", str(out)]) == 0
    listed = json.loads(out.read_text())["utilization"]
    samples = {u["t"]: u for u in listed}
    assert samples[0.0]["extra"] == {"gpu": 0.5}  # the recorded t = 0 task
    assert samples[5.0]["extra"] == {"gpu": 1.0} and samples[5.0]["cpu"] == 0.25  # g and one task of g2
    assert samples[15.0]["extra"] == {"gpu": 1.0}  # g ended, g2's second task took its gpu
    assert samples[21.0]["extra"] == {"gpu": 0.0} and samples[21.0]["machines"] == 1  # no gpu machine up
    gpu_mean = sum(u["extra"]["gpu"] for u in listed) / len(listed)
    assert "utilization means over the samples: cpu " in (printed := capsys.readouterr().out)
    assert f", gpu {gpu_mean:.3f}" in printed
    from tools.fauxmaster.report.result import Run, load_result
    from tools.fauxmaster.report.summary import summary_rows

    rows = dict(summary_rows([Run("r", load_result(out))]))
    assert rows["gpu utilization (mean of samples)"] == [f"{gpu_mean:.3f}"]


def test_a_cell_without_extra_resources_keeps_its_samples_as_they_were(tmp_path):
    result = replay(cdf_trace(tmp_path / "t.omt"), ReplayConfig(schedulers=ONE, until=10.0))
    assert all(set(u) == {"t", "cpu", "memory", "load_cv", "machines"}
               for u in result.to_dict(include_wall=False)["utilization"])


def test_the_usage_ledger_sums_extra_resources_exactly():
    from cellstate.model import Alloc, Machine
    from cellstate.resources import Resources
    from tools.fauxmaster.usage_ledger import UsageLedger

    ledger = UsageLedger()
    ledger.add_machine(Machine("a", Resources.of(4000, 100, 0, gpu=4, fpga=1)))
    ledger.add_machine(Machine("b", Resources.of(4000, 100, 0, gpu=2)))
    ledger.add_machine(Machine("c", Resources(4000, 100)))
    ledger.charge_extra("a", (("gpu", 3),))
    ledger.charge_extra("b", (("gpu", 1),))
    ledger.charge_extra("gone", (("gpu", 9),))  # not followed: nothing
    assert ledger.extra == {"fpga": [1, 0], "gpu": [6, 4]}
    ledger.release([Alloc("j", 0, "a", Resources.of(1, 1, gpu=2))])
    assert ledger.extra["gpu"] == [6, 2]
    ledger.remove_machine("a")  # its capacity and allocation leave the sums
    assert ledger.extra == {"fpga": [0, 0], "gpu": [2, 1]}
    ledger.add_machine(Machine("b", Resources(4000, 100)))  # replaced without gpus
    assert ledger.extra == {"fpga": [0, 0], "gpu": [0, 0]} and ledger.machine_extra == {}


def test_the_page_groups_the_thousands_of_its_counts(tmp_path):
    """Jobs, attempts and tasks placed read 12,345 as everywhere else, not 12345."""
    from tools.fauxmaster.report import page

    run = run_of(replay(cdf_trace(tmp_path / "t.omt"), ReplayConfig(schedulers=[{"name": "b", "kind": "batch"}],
                                                                    until=1200.0)))
    run.data["wait_to_placed"]["jobs"] = 12345
    run.data["schedulers"][0].update(attempts=23456, tasks_placed=34567)
    text = str(page._run_html(run)) + str(page._schedulers_html([run]))
    assert "(12,345 jobs)" in text and "<td>23,456</td>" in text and "<td>34,567</td>" in text
