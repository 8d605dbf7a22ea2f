"""The conflict monitor: frames built from a real etcd cell, merging, rendering, the CLI."""

from __future__ import annotations

import io
import json
import threading
import time

import pytest
from rich.console import Console

from cellstate.codec import encode_job_record, encode_machine
from cellstate.keys import CellKeys
from cellstate.model import Job, JobKind, JobRecord, Machine, MachineState
from cellstate.replica import Replica
from cellstate.resources import Resources
from cellstate.stats_codec import encode_stats
from omega.stats import ConflictNote, HotMachine, SchedulerStats
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
                     "m1", "batch-1×2, svc-1×1", "m1 ← batch-1, m2 ← batch-1", "30.0s", "0.250"):
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
    from cellstate.memory_store import MemoryStore

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
