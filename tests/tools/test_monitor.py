"""The conflict monitor: frames built from a real etcd cell, merging, rendering, the CLI."""

from __future__ import annotations

import io
import math
import json
import threading
import time

import pytest
from rich.console import Console

from cellstate.codec.records import encode_job_record, encode_machine
from cellstate.keys import CellKeys
from cellstate.model import Job, JobKind, JobRecord, Machine, MachineState
from cellstate.replica.watched import Replica
from cellstate.resources import Resources
from cellstate.codec.stats import encode_stats
from cellstate.scheduler_stats import ConflictNote, HotMachine, SchedulerStats
from tools.cli import main
from tools.monitor.live import run_monitor
from tools.monitor.model import (
    ConflictRow, HotSpot, ResourceUse, build_frame, merge_hot_machines, merge_recent_conflicts, to_dict,
)
from tools.monitor.render import render_frame

NOW = 1_700_000_100.0
MACHINES = [
    Machine("m1", Resources.of(4000, 8192, 1000, gpu=2), allocated=Resources.of(1000, 2048, 0, gpu=1)),
    Machine("m2", Resources.of(4000, 8192, 1000), allocated=Resources.of(3000, 2048, 500)),
    Machine("m3", Resources.of(64000, 65536, 9000), state=MachineState.DOWN),  # not counted
]
BATCH = Resources.of(100, 100)
JOBS = [
    JobRecord(Job("b1", JobKind.BATCH, 3, BATCH), "pap", submitted_at=NOW - 30),
    JobRecord(Job("b2", JobKind.BATCH, 2, BATCH), "pp", submitted_at=NOW - 5),
    JobRecord(Job("b3", JobKind.BATCH, 2, BATCH), "aa", submitted_at=NOW - 90),  # fully placed
    JobRecord(Job("k1", JobKind.BATCH, 1, BATCH), "p", submitted_at=NOW - 500, killed=True),
    JobRecord(Job("s1", JobKind.SERVICE, 4, BATCH), "pppp", submitted_at=NOW - 7),
]
S1 = SchedulerStats(
    "batch-1", "batch", pid=11, host="h1", updated_at=NOW, txns=10, commits=8, conflicts=2, retries=2,
    jobs_per_s=1.5, placements_per_s=4.0, busyness=0.25, decision_ms_p50=3.0, decision_ms_p90=5.0,
    decision_ms_p99=9.0, hot_machines=(HotMachine("m1", 2, (("svc-1", 2),)),),
    recent_conflicts=(ConflictNote(NOW - 3, "b1", ("m1",), ("svc-1",)), ConflictNote(NOW - 1, "b2", ("m1",), ("svc-1",))))
S2 = SchedulerStats(
    "svc-1", "service", pid=12, host="h2", updated_at=NOW, txns=5, commits=5, conflicts=1,
    hot_machines=(HotMachine("m1", 1, (("batch-1", 1),)), HotMachine("m2", 1, (("batch-1", 1),))),
    recent_conflicts=(ConflictNote(NOW - 2, "s1", ("m1", "m2"), ("batch-1", "batch-1")),))


def write_cell(store, keys: CellKeys) -> None:
    for m in MACHINES:
        store.put(keys.machine(m.id), encode_machine(m))
    for r in JOBS:
        store.put(keys.job(r.id), encode_job_record(r))


def publish(store, keys: CellKeys, stats: SchedulerStats, ttl: int = 2) -> int:
    lease = store.grant_lease(ttl)
    store.put(keys.stats(stats.name), encode_stats(stats), lease=lease)
    return lease


def pump_until(replica: Replica, condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "replica never reached the expected state"
        replica.pump(0.2)


@pytest.fixture
def cell(etcd_store, cell_keys):
    write_cell(etcd_store, cell_keys)
    return etcd_store, cell_keys


def test_frame_has_a_row_per_leased_stats_key_until_the_lease_goes(cell):
    store, keys = cell
    publish(store, keys, S1, ttl=30)
    lease = publish(store, keys, S2, ttl=2)
    replica = Replica(store, keys)
    replica.sync()
    try:
        frame = build_frame(replica, NOW)
        assert [(r.name, r.kind, r.alive) for r in frame.schedulers] == [
            ("batch-1", "batch", True), ("svc-1", "service", True)]
        row = frame.schedulers[0]
        assert (row.txns, row.conflicts, row.retries, row.conflict_fraction) == (10, 2, 2, 0.25)
        assert (row.jobs_per_s, row.placements_per_s, row.busyness) == (1.5, 4.0, 0.25)
        assert (row.decision_ms_p50, row.decision_ms_p99) == (3.0, 9.0)
        store.revoke_lease(lease)
        pump_until(replica, lambda: len(replica.stats_raw) == 1)
        assert [r.name for r in build_frame(replica, NOW).schedulers] == ["batch-1"]
    finally:
        replica.close()


def test_row_vanishes_when_an_unrefreshed_lease_expires(cell):
    store, keys = cell
    publish(store, keys, S2, ttl=1)
    replica = Replica(store, keys)
    replica.sync()
    try:
        pump_until(replica, lambda: not replica.stats_raw, timeout=15.0)
        assert build_frame(replica, NOW).schedulers == ()
    finally:
        replica.close()


def test_utilization_sums_up_machines_only(cell):
    store, keys = cell
    replica = Replica(store, keys)
    replica.sync()
    frame = build_frame(replica, NOW)
    replica.close()
    assert (frame.machines_up, frame.machines_total) == (2, 3)
    assert frame.utilization == (ResourceUse("cpu", 4000, 8000), ResourceUse("memory", 4096, 16384),
                                 ResourceUse("disk", 500, 2000), ResourceUse("gpu", 1, 2))
    assert [u.fraction for u in frame.utilization] == [0.5, 0.25, 0.25, 0.5]


def test_pending_queues_count_pending_tasks_and_oldest_wait(cell):
    store, keys = cell
    replica = Replica(store, keys)
    replica.sync()
    frame = build_frame(replica, NOW)
    replica.close()
    by_kind = {q.kind: (q.jobs, q.tasks, q.oldest_wait_s) for q in frame.pending}
    assert by_kind == {"batch": (2, 4, 30.0), "service": (1, 4, 7.0)}


def test_undecodable_stats_are_reported_not_dropped(cell):
    store, keys = cell
    store.put(keys.stats("broken"), b"\x81\xa1v\x01")  # a map with a version but no type tag
    replica = Replica(store, keys)
    replica.sync()
    frame = build_frame(replica, NOW)
    replica.close()
    assert frame.schedulers == ()
    assert len(frame.errors) == 1 and keys.stats("broken") in frame.errors[0] and "'t'" in frame.errors[0]


MERGE_CASES = [
    ("none", [], ()),
    ("one-scheduler", [S1], (HotSpot("m1", 2, (("batch-1", 2),), (("svc-1", 2),)),)),
    ("collisions-summed", [S1, S2], (
        HotSpot("m1", 3, (("batch-1", 2), ("svc-1", 1)), (("svc-1", 2), ("batch-1", 1))),
        HotSpot("m2", 1, (("svc-1", 1),), (("batch-1", 1),)))),
]


@pytest.mark.parametrize("stats,expected", [c[1:] for c in MERGE_CASES], ids=[c[0] for c in MERGE_CASES])
def test_merge_hot_machines(stats, expected):
    assert merge_hot_machines(stats) == expected


def test_merge_hot_machines_keeps_the_hottest():
    many = SchedulerStats("a", "batch", hot_machines=tuple(HotMachine(f"m{i}", i + 1) for i in range(10)))
    more = SchedulerStats("b", "batch", hot_machines=(HotMachine("m0", 50),))
    assert [h.machine for h in merge_hot_machines([many, more], limit=3)] == ["m0", "m9", "m8"]


def test_merge_recent_conflicts_newest_first():
    assert merge_recent_conflicts([S1, S2]) == (
        ConflictRow(NOW - 1, "batch-1", "b2", ("m1",), ("svc-1",)),
        ConflictRow(NOW - 2, "svc-1", "s1", ("m1", "m2"), ("batch-1", "batch-1")),
        ConflictRow(NOW - 3, "batch-1", "b1", ("m1",), ("svc-1",)),
    )
    assert len(merge_recent_conflicts([S1, S2], limit=2)) == 2


def _published_frame(cell):
    """The frame of ``cell`` with S1 and S2 published."""
    store, keys = cell
    publish(store, keys, S1, ttl=30)
    publish(store, keys, S2, ttl=30)
    replica = Replica(store, keys)
    replica.sync()
    frame = build_frame(replica, NOW)
    replica.close()
    return frame


def test_render_shows_schedulers_utilization_and_conflicts(cell):
    frame = _published_frame(cell)
    console = Console(record=True, width=160)
    console.print(render_frame(frame))
    text = console.export_text()
    for expected in ("batch-1", "svc-1", "cpu", "50.0%", "4.0 cores / 8.0 cores", "4.0 GiB / 16.0 GiB", "gpu", "25.0%",
                     "m1", "batch-1×2, svc-1×1 ← svc-1×2, batch-1×1", "s1 machine m1, m2 ← batch-1×2", "30.0s",
                     "0.250"):
        assert expected in text, expected


def test_cli_once_json(cell, etcd_server, capsys):
    store, keys = cell
    publish(store, keys, S1, ttl=30)
    publish(store, keys, S2, ttl=30)
    status = main(["monitor", "--once", "--json", "--endpoints", ",".join(etcd_server.endpoints),
                   "--cell", keys.cell])
    assert status == 0
    frame = json.loads(capsys.readouterr().out)
    assert frame["cell"] == keys.cell and frame["revision"] == store.revision()
    assert [(s["name"], s["alive"], s["conflict_fraction"]) for s in frame["schedulers"]] == [
        ("batch-1", True, 0.25), ("svc-1", True, 0.2)]
    assert frame["utilization"][0] == {"name": "cpu", "allocated": 4000, "capacity": 8000, "fraction": 0.5}
    assert {q["kind"]: q["tasks"] for q in frame["pending"]} == {"batch": 4, "service": 4}
    assert frame["hot_machines"][0] == {"machine": "m1", "conflicts": 3, "losers": {"batch-1": 2, "svc-1": 1},
                                        "winners": {"svc-1": 2, "batch-1": 1}}
    assert [c["job"] for c in frame["recent_conflicts"]] == ["b2", "s1", "b1"]


def test_json_follow_sees_changes_through_the_watch(cell):
    store, keys = cell
    out = io.StringIO()
    runner = threading.Thread(target=run_monitor, args=(store, keys),
                              kwargs=dict(json=True, follow=True, refresh_hz=10, duration=2.0, out=out))
    runner.start()
    time.sleep(0.5)
    publish(store, keys, S1, ttl=30)
    runner.join(10)
    assert not runner.is_alive()
    frames = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(frames) >= 10  # 10 per second for 2 s, allowing for slow machines
    assert frames[0]["schedulers"] == []
    assert [s["name"] for s in frames[-1]["schedulers"]] == ["batch-1"]
    assert set(frames[-1]["schedulers"][0]) >= {"recent", "minute", "trend"}  # following frames keep a history


def test_live_screen_renders(cell):
    store, keys = cell
    publish(store, keys, S2, ttl=30)
    console = Console(record=True, width=160, force_terminal=False)
    assert run_monitor(store, keys, refresh_hz=4, duration=0.6, console=console) == 0
    assert "svc-1" in console.export_text()


@pytest.mark.parametrize("args,message", [
    (["--follow"], "--follow needs --json"),
    (["--json", "--follow", "--once"], "exclude each other"),
    (["--refresh-hz", "1"], "--refresh-hz must be between 2 and 60"),
    (["--cell", "a/b"], "--cell"),
    (["--endpoints", "nohost"], "--endpoints"),
], ids=["follow-without-json", "follow-once", "slow-refresh", "bad-cell", "bad-endpoint"])
def test_cli_rejects_bad_flags(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["monitor", *args])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_to_dict_matches_the_frame():
    frame = build_frame_from_stats([S1, S2])
    d = to_dict(frame)
    assert json.loads(json.dumps(d)) == d
    assert d["schedulers"][1]["name"] == "svc-1" and d["recent_conflicts"][0]["machines"] == ["m1"]


def build_frame_from_stats(stats):
    """A frame from a replica of an in-memory cell holding only ``stats``."""
    from cellstate.memory.store import MemoryStore

    store, keys = MemoryStore(), CellKeys("mem")
    for s in stats:
        store.put(keys.stats(s.name), encode_stats(s))
    replica = Replica(store, keys)
    replica.sync()
    return build_frame(replica, NOW)


def test_cli_reports_an_unreachable_store(capsys):
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["monitor", "--once", "--endpoints", f"127.0.0.1:{port}"]) == 1
    assert "omega: monitor:" in capsys.readouterr().err


def test_render_at_80_columns_keeps_the_scheduler_figures_readable(cell):
    frame = _published_frame(cell)
    console = Console(record=True, width=80)
    console.print(render_frame(frame))
    text = console.export_text()
    assert all(len(line) <= 80 for line in text.splitlines())
    for expected in ("batch-1", "svc-1", "place/s", "confl m/j", "frac", "0.250", "stale", "busy", "p99 ms"):
        assert expected in text, expected
    assert "…" not in "".join(line for line in text.splitlines() if "batch-1" in line or "svc-1" in line)


# -- the screen at 80×24 and 200×50 ---------------------------------------------------------------

from tools.monitor.model import (  # noqa: E402
    ConflictHistory, MonitorFrame, PendingQueue, WindowRate, scheduler_row,
)
from tools.monitor.render import elide  # noqa: E402

SCHEDULERS = [("batch-0", "batch"), ("batch-1", "batch"), ("borg-0", "borg"), ("service-0", "service")]


def crowded_frame(names=SCHEDULERS) -> MonitorFrame:
    """A busy cell's frame: four schedulers watched for 70 s (conflicts rising), ten hot
    machines, twenty recent conflicts (one over 30 machines, some on the job record)."""
    history = ConflictHistory()
    for t in range(71):
        history.observe([SchedulerStats(name, kind, updated_at=NOW - 70 + t, commits=100 * t,
                                        conflicts=t * t // 10 + i) for i, (name, kind) in enumerate(names)])
    rows = []
    for i, (name, kind) in enumerate(names):
        s = SchedulerStats(name, kind, updated_at=NOW, txns=9000 + i, commits=7000, conflicts=490 + i,
                           job_conflicts=3, stale_retries=4, placements_per_s=374.6, busyness=0.09,
                           decision_ms_p50=1.2, decision_ms_p99=4.6)
        rows.append(scheduler_row(s, history))
    hot = tuple(HotSpot(f"m-{j:04d}", 40 - j, (("batch-0", 20 - j), ("batch-1", 20)), (("borg-0", 40 - j),))
                for j in range(10))
    wide_conflict = tuple(f"m-{x:04d}" for x in range(30))
    conflicts = tuple(
        ConflictRow(NOW - j, names[j % len(names)][0], f"job-{j:06d}",
                    wide_conflict if j == 0 else () if j % 5 == 4 else (f"m-{j:04d}",),
                    ("batch-1",) * 30 if j == 0 else () if j % 5 == 4 else ("borg-0",))
        for j in range(20))
    return MonitorFrame(
        cell="demo", revision=123456, at=NOW, machines_up=1000, machines_total=1000, schedulers=tuple(rows),
        utilization=(ResourceUse("cpu", 9_780_500, 14_544_000), ResourceUse("memory", 20_337 * 1024, 58_176 * 1024),
                     ResourceUse("disk", 0, 930_816 * 1024)),
        pending=(PendingQueue("batch", 12, 580, 4.2), PendingQueue("service", 0, 0, 0.0)),
        hot_machines=hot, recent_conflicts=conflicts)


def screen_text(frame: MonitorFrame, width: int, height: int) -> list[str]:
    console = Console(record=True, width=width, height=height, file=io.StringIO())
    console.print(render_frame(frame, fit_height=True))
    return console.export_text().splitlines()


def test_80x24_screen_fits_and_shows_every_section():
    lines = screen_text(crowded_frame(), 80, 24)
    text = "\n".join(lines)
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), text
    for name, _ in SCHEDULERS:  # every scheduler, its name whole (no "batc…")
        assert any(line.startswith(name + " ") for line in lines), name
    assert "…" not in "".join(line for line in lines if line.startswith(("batch-", "borg-", "service-")))
    header = next(line for line in lines if line.startswith("scheduler "))
    for column in ("place/s", "confl m/j", "frac", "10s", "60s", "trend"):
        assert column in header, column
    assert "pending" in text and "batch 12 jobs/580 tasks" in text and "cpu" in text and "memory" in text
    hot_title = next(line for line in lines if line.startswith("hot machines"))
    conflict_title = next(line for line in lines if line.startswith("recent conflicts"))
    hot_shown = lines.index(conflict_title) - lines.index(hot_title) - 1
    conflicts_shown = len(lines) - lines.index(conflict_title) - 1
    assert hot_shown >= 1 and conflicts_shown >= 3
    assert f"+{10 - hot_shown} more not shown" in hot_title  # says how many were left out
    assert f"+{20 - conflicts_shown} more not shown" in conflict_title
    newest = lines[lines.index(conflict_title) + 1]
    assert "machine m-0000, m-0001" in newest and "← batch-1×30" in newest
    assert int(newest.split(" +")[1].split()[0]) + newest.count("m-00") == 30  # the rest counted, not lost
    assert any(" job " in line and "the job record changed" in line for line in lines)  # each conflict's cause
    assert not any(line.strip() == "" for line in lines)  # no blank lines wasted
    columns = header.replace("confl m/j", "confl_m/j").replace("p99 ms", "p99_ms").split()
    for line in lines:  # no blank columns: every row has a value under every header
        if line.startswith(("batch-", "borg-", "service-")):
            assert len(line.split()) == len(columns), (columns, line)


def test_200x50_screen_shows_everything_with_the_wide_columns():
    lines = screen_text(crowded_frame(), 200, 50)
    text = "\n".join(lines)
    assert len(lines) <= 50 and all(len(line) <= 200 for line in lines), text
    header = next(line for line in lines if line.startswith("scheduler "))
    for column in ("kind", "jobs/s", "txns", "retries", "p50 ms", "p99 ms", "10s", "60s", "trend"):
        assert column in header, column
    assert "9,780.5 cores / 14,544.0 cores" in text
    assert "more not shown" not in text.split("recent conflicts")[0]  # all ten hot machines
    assert len([line for line in lines if line.startswith("m-00")]) == 10
    assert "m-0000, m-0001, m-0002" in text


def test_windowed_fraction_and_trend_show_the_rise():
    frame = crowded_frame()
    row = frame.schedulers[0]
    # conflicts = t*t//10: over the last 10 s (t 60..70) 490-360 = 130 per 1,000 commits
    assert (row.recent.seconds, row.recent.commits, row.recent.conflicts) == (10.0, 1000, 130)
    assert row.minute.conflicts == 490 - 10 and row.minute.commits == 6000
    assert [w.conflicts for w in row.trend] == [30, 50, 70, 90, 110, 130]
    line = next(line for line in screen_text(frame, 80, 24) if line.startswith("batch-0 "))
    assert "0.130" in line and "0.080" in line and "↑" in line
    sparks = line.split("0.080")[1].split()[0]
    assert len(sparks) == 7 and list(sparks[:6]) == sorted(sparks[:6])  # rising, and the arrow


def test_long_scheduler_names_stay_whole_and_columns_go_instead():
    names = [(f"batch-scheduler-with-a-long-name-{i}", "batch") for i in range(2)]
    lines = screen_text(crowded_frame(names), 80, 24)
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
    for name, _ in names:
        assert any(line.startswith(name + " ") for line in lines), name
    header = next(line for line in lines if line.startswith("scheduler "))
    assert "10s" in header and "confl m/j" in header and "p99 ms" not in header


@pytest.mark.parametrize("height", [8, 12, 16])
def test_small_terminals_still_fit(height):
    lines = screen_text(crowded_frame(), 80, height)
    assert len(lines) <= height and all(len(line) <= 80 for line in lines)


def test_without_fit_height_every_row_is_printed():
    console = Console(record=True, width=80, height=24, file=io.StringIO())
    console.print(render_frame(crowded_frame()))
    lines = console.export_text().splitlines()
    assert len([line for line in lines if line.startswith("m-00")]) == 10 and "more not shown" not in "".join(lines)
    assert all(len(line) <= 80 for line in lines)


@pytest.mark.parametrize("names,room,expected", [
    (["m1", "m2", "m3"], 40, "m1, m2, m3"),
    ([f"m{i}" for i in range(1, 31)], 16, "m1, m2, m3 +27"),
    (["a-very-long-machine-name", "m2"], 5, "a-very-long-machine-name +1"),
    ([], 10, ""),
])
def test_elide(names, room, expected):
    assert elide(names, room) == expected


def test_history_restarts_with_a_restarted_scheduler_and_forgets_gone_ones():
    history = ConflictHistory()
    for t in range(5):
        history.observe([SchedulerStats("a", "batch", updated_at=float(t), commits=10 * t, conflicts=t),
                         SchedulerStats("b", "batch", updated_at=float(t), commits=t)])
    assert history.window("a", 10) == WindowRate(4.0, 40, 4) and history.window("a", 2) == WindowRate(2.0, 20, 2)
    history.observe([SchedulerStats("a", "batch", updated_at=4.0, commits=999)])  # same stamp: ignored
    assert history.window("a", 10) == WindowRate(4.0, 40, 4) and history.window("b", 10) is None  # b gone
    history.observe([SchedulerStats("a", "batch", updated_at=6.0, commits=3, conflicts=0)])  # restarted
    assert history.window("a", 10) is None
    history.observe([SchedulerStats("a", "batch", updated_at=7.0, commits=3, conflicts=2)])
    assert history.window("a", 10).fraction == math.inf and WindowRate(1.0, 0, 0).fraction is None


def test_once_json_has_no_windows_and_names_each_conflicts_cause(cell):
    frame = to_dict(_published_frame(cell))
    assert [(s["recent"], s["minute"], s["trend"]) for s in frame["schedulers"]] == [(None, None, [])] * 2
    assert [c["cause"] for c in frame["recent_conflicts"]] == ["machine"] * 3


def test_q_quits_the_live_screen_and_restores_the_terminal(cell):
    import os
    import termios

    from tools.monitor.keys import KeyReader

    store, keys = cell
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        os.write(master, b"xq")  # another key first: ignored
        reader = KeyReader(slave)
        console = Console(record=True, width=160, force_terminal=False)
        # The duration is only a bound should q be missed: then reader.quit stays False.
        assert run_monitor(store, keys, refresh_hz=4, duration=30, console=console, key_reader=reader) == 0
        assert reader.quit
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_keys_are_not_read_off_a_terminal():
    import os

    from tools.monitor.keys import KeyReader

    read, write = os.pipe()
    try:
        os.write(write, b"q")
        reader = KeyReader(read)
        with reader:
            assert not reader.active and reader.wait(0) is False
        assert os.read(read, 1) == b"q"  # left for whoever reads the pipe
    finally:
        os.close(read)
        os.close(write)


def test_a_stored_unsafe_job_id_is_escaped_on_the_screen():
    from dataclasses import replace

    frame = crowded_frame()
    conflicts = (replace(frame.recent_conflicts[1], job="evil\x1b[2J\nrow"),) + frame.recent_conflicts[2:]
    console = Console(record=True, width=160, height=50, file=io.StringIO(), force_terminal=True)
    console.print(render_frame(replace(frame, recent_conflicts=conflicts), fit_height=True))
    out = console.file.getvalue()
    assert "\x1b[2J" not in out and "evil\\x1b[2J\\nrow" in console.export_text()


# -- GPU devices ----------------------------------------------------------------------------------

from cellstate.devices import GpuAsk, bind, gpu_capacity  # noqa: E402
from tools.monitor.model import GpuUse, gpu_use, utilization  # noqa: E402


def gpu_machines() -> list[Machine]:
    """Two 4-GPU machines: one with a 0.3 share on device 0 and two whole GPUs, one idle; a
    CPU machine; a down GPU machine (not counted)."""
    cap = Resources.of(32_000, 65_536, 0, **gpu_capacity(4))
    used = (bind(Resources.of(1000, 64, 0, gpu=300), GpuAsk(1, 300), (0,))
            + bind(Resources.of(1000, 64, 0, gpu=2000), GpuAsk(2, 1000), (1, 2)))
    return [Machine("g1", cap, allocated=used, task_count=2), Machine("g2", cap),
            Machine("c1", Resources.of(4000, 8192)),
            Machine("g3", cap, allocated=used, state=MachineState.DOWN)]


def test_gpu_use_sums_the_devices_of_up_machines():
    up = [m for m in gpu_machines() if m.state is MachineState.UP]
    g = gpu_use(up)
    assert g == GpuUse(machines=2, devices=8, allocated=2300, capacity=8000, idle_devices=5, partial_devices=1,
                       partial_idle=700)
    assert g.fraction == pytest.approx(2300 / 8000) and g.partial_fraction == pytest.approx(700 / 5700)
    assert gpu_use([Machine("c1", Resources.of(4000, 8192)), MACHINES[0]]) is None  # no devices: counted gpu only
    names = [u.name for u in utilization(up)]
    assert names == ["cpu", "memory", "disk", "gpu", "gpu.0", "gpu.1", "gpu.2", "gpu.3"]  # (the frame's data)


def test_a_gpu_cell_frame_shows_its_devices_at_80x24_and_200x50_and_in_json(etcd_store, cell_keys):
    for m in gpu_machines():
        etcd_store.put(cell_keys.machine(m.id), encode_machine(m))
    replica = Replica(etcd_store, cell_keys)
    replica.sync()
    try:
        frame = build_frame(replica, NOW)
    finally:
        replica.close()
    assert frame.gpu == gpu_use([m for m in gpu_machines() if m.state is MachineState.UP])
    d = to_dict(frame)
    assert json.loads(json.dumps(d)) == d
    assert d["gpu"]["devices"] == 8 and d["gpu"]["fraction"] == pytest.approx(0.2875)
    for width, height in ((80, 24), (200, 50)):  # the devices are on the GPU line, not a bar each
        shown = screen_text(frame, width, height)
        assert not any(line.startswith("gpu.") or " gpu.0 " in line for line in shown), shown
        assert sum(line.startswith(("gpus ", "gpu devices")) for line in shown) == 1
    crowded = crowded_frame()
    busy = MonitorFrame(**{**{f: getattr(crowded, f) for f in crowded.__dataclass_fields__},
                           "utilization": crowded.utilization + (ResourceUse("gpu", 5_210_300, 8_000_000),),
                           "gpu": GpuUse(1000, 8000, 5_210_300, 8_000_000, 1900, 610, 301_400)})
    lines = screen_text(busy, 80, 24)
    text = "\n".join(lines)
    assert len(lines) <= 24 and all(len(line) <= 80 for line in lines), text
    gpu_line = next(line for line in lines if line.startswith("gpus "))
    assert "5,210.3/8,000 (65%)" in gpu_line and "idle devs 1,900" in gpu_line
    assert "part-used 610 (11% of idle)" in gpu_line
    for section in ("pending", "scheduler ", "hot machines", "recent conflicts"):  # every section still there
        assert any(line.startswith(section) for line in lines), section
    wide = screen_text(busy, 200, 50)
    line = next(line for line in wide if line.startswith("gpu devices"))
    assert "65.1%" in line and "5,210.3/8,000 GPUs on 1,000 machines" in line and "1,900 devices idle" in line
    assert "610 part-used (10.8% of the idle GPU, usable by shares only)" in line
    for shown in (lines, wide):  # the gpu sum is on the GPU line only, not a bar of its own too
        assert not any(line.startswith("gpu ") and not line.startswith("gpu devices") for line in shown), shown
    # a cell whose machines count GPUs without devices (no GPU line): the sum's bar, in GPUs
    no_devices = MonitorFrame(**{**{f: getattr(busy, f) for f in busy.__dataclass_fields__}, "gpu": None})
    gpu_bar = next(line for line in screen_text(no_devices, 200, 50) if line.startswith("gpu "))
    assert "5,210.3 GPUs / 8,000.0 GPUs" in gpu_bar and "5,210,300" not in gpu_bar, gpu_bar
    assert not any(line.startswith("gpus ") for line in screen_text(crowded, 80, 24))  # no devices: no GPU line
