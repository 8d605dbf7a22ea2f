"""``omega demo`` end to end, and the monitor against live scheduler processes.

The demo runs as a subprocess for 20 s with its default cell (1,000 machines, 2 batch, 1
service and, when the kind exists, 1 Borg scheduler): it must place tasks, see conflicts,
leave a clean cell and no process behind. The monitor tests start two real ``omega
scheduler run`` processes (via the demo's ``Children``) on the session etcd.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from cellstate.cellspec import CellSpec, init_cell
from tools.cli import main
from tools.demo.cell import DemoConfig
from tools.demo.children import PROJECT_ROOT, Children
from tools.demo.summary import final_stats, scheduler_summary
from tools.monitor.live import run_monitor
from cellstate.scheduler_stats import SchedulerStats

pytestmark = pytest.mark.slow

DEMO_SECONDS = 20
LEASE_GONE_S = 10.0  # TTL 3 s; the lease may have been refreshed just before the kill


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _refused(endpoint: str) -> bool:
    host, port = endpoint.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return False
    except OSError:
        return True


def test_demo_places_conflicts_and_leaves_a_clean_cell(tmp_path):
    summary_path = tmp_path / "summary.json"
    # 200 machines: with one owner per job, conflicts are over machines only, and a smaller cell
    # makes them certain within the run whatever the host's speed
    cmd = [sys.executable, "-m", "tools.cli", "demo", "--duration", str(DEMO_SECONDS), "--no-monitor",
           "--machines", "200", "--summary-json", str(summary_path), "--run-dir", str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=DEMO_SECONDS + 70)
    assert done.returncode == 0, f"demo exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    summary = json.loads(summary_path.read_text())
    assert summary["ok"] and summary["check"]["ok"], summary["check"]
    assert summary["placements"] > 0
    assert summary["conflicts"] > 0, [(s["name"], s["txns"], s["conflicts"]) for s in summary["schedulers"]]
    assert all(s["source"] == "final" and s["exit_code"] == 0 for s in summary["schedulers"]), summary["schedulers"]
    assert {s["kind"] for s in summary["schedulers"]} >= {"batch", "service"}
    assert [u["name"] for u in summary["utilization"]][:2] == ["cpu", "memory"]
    assert summary["utilization"][0]["allocated"] > 0
    assert "invariant check" in done.stdout and "clean" in done.stdout
    assert all(len(line) <= 80 for line in done.stdout.splitlines()), done.stdout  # fits an 80-column terminal
    assert "=== omega demo summary" in done.stdout and "total" in done.stdout
    assert set(summary["metrics"]) == {"agents"} | {s["name"] for s in summary["schedulers"]}
    assert all(_gone(child["pid"]) for child in summary["children"].values()), summary["children"]
    assert all(_refused(endpoint) for endpoint in summary["etcd_endpoints"]), "etcd still answers"


def test_the_gpu_demo_places_gpu_tasks_on_devices_and_leaves_a_clean_cell(tmp_path):
    summary_path = tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "tools.cli", "demo", "--gpu", "--duration", "8", "--no-monitor", "--rate", "4",
           "--machines", "40", "--summary-json", str(summary_path), "--run-dir", str(tmp_path / "run")]
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"demo exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    summary = json.loads(summary_path.read_text())
    assert summary["ok"] and summary["check"]["ok"], summary["check"]
    used = {u["name"]: u["allocated"] for u in summary["utilization"]}
    assert used["gpu"] > 0 and used["gpu.0"] > 0  # tasks hold named devices
    gpu = summary["gpu"]  # the monitor's sums, in the summary too
    assert gpu["devices"] > 0 and 0 < gpu["allocated"] <= gpu["capacity"] == 1000 * gpu["devices"]
    assert "gpu devices" in done.stdout and "gpu.0 " not in done.stdout  # the text sums the devices
    cell_line = next(line for line in done.stdout.splitlines() if line.startswith("cell 'demo'"))
    assert " GPUs on " in cell_line and "V100M32" in done.stdout  # the GPU mix it wrote
    assert not any(line.startswith("  gpu  ") for line in done.stdout.splitlines())  # the sum is on the GPU line
    assert (tmp_path / "run" / "gpu-batch-chain.toml").read_text().count('name = "fgd"') == 1


def test_a_closed_terminal_stops_the_whole_demo(tmp_path):
    """SIGHUP (the terminal closed) stops the demo like Ctrl-C: its children run in process
    groups of their own, so the demo must stop them; nothing is left running."""
    summary_path, run_dir = tmp_path / "summary.json", tmp_path / "run"
    cmd = [sys.executable, "-m", "tools.cli", "demo", "--duration", "120", "--no-monitor", "--machines", "50",
           "--summary-json", str(summary_path), "--run-dir", str(run_dir)]
    demo = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in demo.stdout:
            if "running" in line:  # "agents …, schedulers …, generator at … running"
                break
        demo.send_signal(signal.SIGHUP)
        out, _ = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
    summary = json.loads(summary_path.read_text())
    assert summary["children"] and all(_gone(child["pid"]) for child in summary["children"].values()), out
    assert all(_refused(endpoint) for endpoint in summary["etcd_endpoints"]), "etcd still answers"


def test_a_sigkilled_demo_leaves_no_etcd_data_behind(tmp_path):
    """SIGKILL gives the demo no chance to clean up: its etcd ends by its parent-death signal and
    the etcd data directory (tens of MB) is removed by the watcher of cellstate.dir_reaper."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    cmd = [sys.executable, "-m", "tools.cli", "demo", "--duration", "120", "--no-monitor", "--machines", "50",
           "--run-dir", str(tmp_path / "run")]
    demo = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TMPDIR": str(temp)})
    try:
        for line in demo.stdout:
            if line.startswith("etcd up"):
                endpoint = line.split(": ", 1)[1].split(";", 1)[0].split(",")[0]
            if "running" in line:
                break
        data = list(temp.glob("omega-etcd-*"))
        assert len(data) == 1 and any(data[0].rglob("*")), "the demo's etcd data directory"
        demo.kill()
        demo.wait(10)
    finally:
        if demo.poll() is None:
            demo.kill()
    _poll(lambda: not data[0].exists(), 30, f"{data[0]} removed after the SIGKILL")
    _poll(lambda: _refused(endpoint), 30, "the demo's etcd gone")


@pytest.fixture
def live_cell(etcd_server, etcd_store, cell_keys, tmp_path):
    """A small cell served by two batch scheduler processes; the Children object."""
    init_cell(etcd_store, cell_keys, CellSpec(machines=20, zones=2))
    children = Children(tmp_path)
    try:
        for name in ("batch-a", "batch-b"):
            children.start(name, ["scheduler", "run", "--kind", "batch", "--name", name, "--endpoints",
                                  ",".join(etcd_server.endpoints), "--cell", cell_keys.cell])
        yield etcd_store, cell_keys, children
    finally:
        children.stop_all(10.0)


def _monitored(etcd_server, keys, capsys) -> set[str]:
    assert main(["monitor", "--once", "--json", "--endpoints", ",".join(etcd_server.endpoints),
                 "--cell", keys.cell]) == 0
    return {row["name"] for row in json.loads(capsys.readouterr().out)["schedulers"]}


def _poll(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_monitor_lists_live_schedulers_until_a_killed_one_loses_its_lease(live_cell, etcd_server, capsys):
    _, keys, children = live_cell
    _poll(lambda: _monitored(etcd_server, keys, capsys) == {"batch-a", "batch-b"}, 30.0, "both schedulers")
    victim = children.named("batch-b")[0]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.process.wait(5)
    killed_at = time.monotonic()
    _poll(lambda: _monitored(etcd_server, keys, capsys) == {"batch-a"}, LEASE_GONE_S, "the killed one to vanish")
    assert time.monotonic() - killed_at <= LEASE_GONE_S
    assert children.named("batch-a")[0].running


def test_live_screen_shows_the_running_schedulers(live_cell):
    store, keys, children = live_cell
    console = Console(record=True, width=180, file=io.StringIO(), force_terminal=True)
    # The first frames may predate the schedulers' first stats: keep redrawing for ~2 s.
    _poll(lambda: {c.name for c in children.children} <= set(_stats_names(store, keys)), 30.0, "stats keys")
    assert run_monitor(store, keys, refresh_hz=4, duration=2.0, console=console) == 0
    screen = console.export_text()
    for text in ("omega monitor", keys.cell, "batch-a", "batch-b", "memory", "pending", "cpu", "recent conflicts"):
        assert text in screen, f"{text!r} not on the screen:\n{screen[-2000:]}"


def _stats_names(store, keys) -> list[str]:
    return [kv.key.rsplit("/", 1)[1] for kv in store.range(keys.kind_prefix("stats")).kvs]


# -- pieces --------------------------------------------------------------------------------


@pytest.mark.parametrize("lines, expected", [
    ([], None),
    (["scheduler 'a' serving", 'final-stats {"name": "a", "txns": 3}'], {"name": "a", "txns": 3}),
    (['final-stats {"txns": 1}', 'final-stats {"txns": 2}'], {"txns": 2}),
    (["final-stats {not json"], None),
], ids=["none", "one", "last-wins", "bad-json"])
def test_final_stats_line(lines, expected):
    assert final_stats(lines) == expected


@pytest.mark.parametrize("final, leased, source, txns, fraction", [
    ({"txns": 10, "commits": 8, "conflicts": 2, "tasks_placed": 40}, None, "final", 10, 0.25),
    (None, SchedulerStats("b", "batch", txns=5, commits=4, conflicts=1), "lease", 5, 0.25),
    ({"txns": 7, "commits": 0, "conflicts": 7}, SchedulerStats("b", "batch", txns=1), "final", 7, 0.0),
    (None, None, "none", 0, 0.0),
], ids=["final", "lease-fallback", "final-preferred", "nothing"])
def test_scheduler_summary_sources(final, leased, source, txns, fraction):
    s = scheduler_summary("b", "batch", 0, final, leased)
    assert (s.source, s.txns, s.conflict_fraction) == (source, txns, fraction)


@pytest.mark.parametrize("changes, field", [
    ({"machines": 0}, "machines"),
    ({"rate": -1}, "rate"),
    ({"time_scale": 0}, "time_scale"),
    ({"duration": 0}, "duration"),
    ({"service_fraction": 1.5}, "service_fraction"),
    ({"cell": "a/b"}, "cell"),
    ({"solver_schedulers": -1}, "solver_schedulers"),
    ({"batch_schedulers": 0, "service_schedulers": 0, "borg_schedulers": 0}, "scheduler"),
], ids=["machines", "rate", "time-scale", "duration", "service-fraction", "cell", "solver-schedulers",
        "no-schedulers"])
def test_config_rejects_bad_values(changes, field):
    with pytest.raises(ValueError, match=field):
        DemoConfig(**changes)


@pytest.mark.parametrize("args, message", [
    (["--conflict-mode", "bogus"], "bogus"),
    (["--machines", "0"], "machines"),
    (["--time-scale", "-2"], "time_scale"),
], ids=["conflict-mode", "machines", "time-scale"])
def test_cli_rejects_bad_flags_before_starting_anything(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_solver_schedulers_join_the_demo_by_name():
    config = DemoConfig(batch_schedulers=1, service_schedulers=0, borg_schedulers=0, solver_schedulers=2)
    assert config.scheduler_names() == [("batch-0", "batch"), ("solver-0", "solver"), ("solver-1", "solver")]


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secure"])
def test_demo_prints_its_metrics_and_how_to_attach_a_monitor(tmp_path, secure):
    """The demo's lines name every process's /metrics port and an ``omega monitor`` command;
    the command attaches to the running cell, every endpoint answers a scrape (with the cell's
    client certificate when secure; without one it is refused)."""
    import shutil
    import ssl
    import tempfile
    import urllib.request

    run_dir = Path(tempfile.mkdtemp(prefix="omega-t-"))  # short paths: the printed command fits 80 columns
    cmd = [sys.executable, "-m", "tools.cli", "demo", "--duration", "120", "--no-monitor", "--machines", "50",
           "--run-dir", str(run_dir), *(["--secure"] if secure else [])]
    demo = subprocess.Popen(cmd, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        for line in demo.stdout:
            lines.append(line.rstrip("\n"))
            if any(x.startswith("attach a monitor:") for x in lines) and not line.rstrip().endswith("\\"):
                break
        text = "\n".join(lines)
        assert all(len(line) <= 80 for line in lines), text
        start = next(i for i, line in enumerate(lines) if line.startswith("metrics:"))
        block = [lines[start]]
        for line in lines[start + 1:]:
            if not line.startswith("    "):
                break
            block.append(line)
        metrics = " ".join(line.strip() for line in block)
        scheme = "https" if secure else "http"
        assert f"metrics: {scheme}://127.0.0.1:PORT/metrics" in metrics, text
        ports = dict(pair.split() for pair in metrics.split("PORT of ", 1)[1].split(", ") if " " in pair)
        assert {"agents", "batch-0", "batch-1", "service-0", "borg-0"} <= set(ports), ports
        attach = text.split("attach a monitor: ", 1)[1].replace(" \\\n", " ").split()
        assert attach[:2] == ["omega", "monitor"] and "--cell" in attach and "--endpoints" in attach
        monitor = subprocess.run([sys.executable, "-m", "tools.cli", *attach[1:], "--once", "--json"], cwd=PROJECT_ROOT,
                                 capture_output=True, text=True, timeout=30)
        assert monitor.returncode == 0, monitor.stderr
        assert json.loads(monitor.stdout)["cell"] == "demo"
        context = None
        if secure:
            pki_dir = run_dir / "pki"
            bare = ssl.create_default_context(cafile=str(pki_dir / "ca.pem"))
            with pytest.raises((ssl.SSLError, OSError)):
                urllib.request.urlopen(f"https://127.0.0.1:{ports['agents']}/metrics", timeout=5, context=bare).read()
            context = ssl.create_default_context(cafile=str(pki_dir / "ca.pem"))
            context.load_cert_chain(str(pki_dir / "metrics-scraper.pem"), str(pki_dir / "metrics-scraper.key"))
        for name, port in ports.items():
            body = urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/metrics", timeout=5, context=context).read()
            assert b"process_cpu_seconds_total" in body and b'cell="demo"' in body, name
        demo.send_signal(signal.SIGTERM)
        out, _ = demo.communicate(timeout=90)
        assert "invariant check" in out, out[-2000:]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(30)
        shutil.rmtree(run_dir, ignore_errors=True)
