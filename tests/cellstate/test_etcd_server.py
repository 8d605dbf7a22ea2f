"""The embedded etcd launcher: bounded-history flags, ports recorded per data dir, the supervisor."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

from cellstate.etcd.binary import EtcdError
from cellstate.etcd.cluster import CLUSTER_FILE, EtcdCluster
from cellstate.etcd.options import DEFAULT_COMPACTION_RETENTION, DEFAULT_QUOTA_BACKEND_BYTES, EtcdOptions
from cellstate.etcd.store import EtcdStore
from cellstate.etcd.supervisor import RestartPolicy, Supervisor


def command_of(options: EtcdOptions, tmp_path) -> list[str]:
    return EtcdCluster(size=1, options=options, data_dir=str(tmp_path / "d"), binary="/bin/true").members[0].command()


def flag(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:g} s"
        time.sleep(0.05)


# -- bounded history --------------------------------------------------------------------------------


def test_history_is_bounded_by_default(tmp_path):
    command = command_of(EtcdOptions(), tmp_path)
    assert flag(command, "--auto-compaction-mode") == "revision"
    assert flag(command, "--auto-compaction-retention") == str(DEFAULT_COMPACTION_RETENTION)
    assert flag(command, "--quota-backend-bytes") == str(DEFAULT_QUOTA_BACKEND_BYTES)


def test_history_flags_follow_the_options(tmp_path):
    command = command_of(EtcdOptions(auto_compaction_retention=500, quota_backend_bytes=1 << 30), tmp_path)
    assert flag(command, "--auto-compaction-retention") == "500"
    assert flag(command, "--quota-backend-bytes") == str(1 << 30)
    off = command_of(EtcdOptions(auto_compaction_retention=0), tmp_path / "off")
    assert "--auto-compaction-mode" not in off and "--auto-compaction-retention" not in off
    with pytest.raises(EtcdError, match=">= 0"):
        command_of(EtcdOptions(auto_compaction_retention=-1), tmp_path / "neg")


def test_cli_flags_reach_the_options():
    from tools.cli import build_parser

    args = build_parser().parse_args(["etcd", "up", "--auto-compaction-retention", "123",
                                      "--quota-backend-bytes", "456"])
    from tools.cli.etcd import server_options

    options = server_options(args)
    assert options["auto_compaction_retention"] == 123 and options["quota_backend_bytes"] == 456
    cell = build_parser().parse_args(["cell", "up"])
    assert server_options(cell)["auto_compaction_retention"] == DEFAULT_COMPACTION_RETENTION
    from tools.cli.demo import config_from_args

    demo = config_from_args(build_parser().parse_args(["demo", "--etcd-compaction-retention", "7",
                                                        "--etcd-quota-bytes", "8"]))
    assert (demo.etcd_compaction_retention, demo.etcd_quota_bytes) == (7, 8)


# -- ports recorded in the data dir ---------------------------------------------------------------------


def test_ports_are_recorded_and_reused(tmp_path):
    first = EtcdCluster(size=3, data_dir=str(tmp_path), binary="/bin/true")
    recorded = json.loads((tmp_path / CLUSTER_FILE).read_text())
    assert [m["client_port"] for m in recorded["members"]] == [m.spec.client_port for m in first.members]
    again = EtcdCluster(size=3, data_dir=str(tmp_path), binary="/bin/true")
    assert [(m.spec.client_port, m.spec.peer_port) for m in again.members] == \
        [(m.spec.client_port, m.spec.peer_port) for m in first.members]
    assert again.members[0].token == first.members[0].token and again.recorded and not first.recorded
    ports = {p for m in first.members for p in (m.spec.client_port, m.spec.peer_port)}
    assert len(ports) == 6


@pytest.mark.parametrize("kwargs, message", [
    (dict(size=1), "records a cluster of 3 member"),
    (dict(size=3, client_port=1), "records client port"),
], ids=["size", "port"])
def test_a_recorded_cluster_must_match(tmp_path, kwargs, message):
    EtcdCluster(size=3, data_dir=str(tmp_path), binary="/bin/true")
    with pytest.raises(EtcdError, match=message):
        EtcdCluster(data_dir=str(tmp_path), binary="/bin/true", **kwargs)


def test_member_data_without_recorded_ports_is_refused(tmp_path):
    (tmp_path / "m1.etcd").mkdir()
    with pytest.raises(EtcdError, match="no etcd-cluster.json"):
        EtcdCluster(size=3, data_dir=str(tmp_path), binary="/bin/true")


def test_a_taken_recorded_port_is_one_clear_line(tmp_path):
    cluster = EtcdCluster(size=1, data_dir=str(tmp_path), binary="/bin/true")
    port = cluster.members[0].spec.client_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        again = EtcdCluster(size=1, data_dir=str(tmp_path), binary="/bin/true")
        with pytest.raises(EtcdError) as info:
            again.start()
    message = str(info.value)
    assert "\n" not in message and f"client port {port} of member m0" in message and CLUSTER_FILE in message


def test_a_stopped_cluster_restarts_on_its_data_dir(tmp_path):
    options = EtcdOptions(unsafe_no_fsync=True)
    with EtcdCluster(size=1, options=options, data_dir=str(tmp_path)) as cluster:
        endpoints = cluster.endpoints
        with EtcdStore(endpoints) as store:
            store.put("/t/kept", b"v1")
    with EtcdCluster(size=1, options=options, data_dir=str(tmp_path)) as again:
        assert again.endpoints == endpoints
        with EtcdStore(again.endpoints) as store:
            assert store.get("/t/kept").value == b"v1"


# -- supervision ----------------------------------------------------------------------------------------


def test_supervisor_restarts_a_killed_member_which_keeps_its_data(tmp_path):
    lines: list[str] = []
    with EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True), data_dir=str(tmp_path)) as cluster:
        with EtcdStore(cluster.endpoints, timeout=2.0) as store:
            store.put("/t/before", b"1")
            cluster.supervise(report=lines.append, interval=0.1)
            old = cluster.members[0].pid
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: any("healthy again" in line for line in lines), what="the member back")
            assert cluster.members[0].pid != old and cluster.supervisor.restarts == {"m0": 1}
            wait_for(lambda: _reads(store, "/t/before") == b"1", what="a read after the restart")
    assert any(f"(pid {old}) exited with status -9" in line for line in lines), lines


def _reads(store: EtcdStore, key: str):
    try:
        kv = store.get(key)
    except Exception:  # the client may need a moment to reconnect
        return None
    return kv.value if kv else None


def test_supervisor_leaves_a_crash_looping_member_down(tmp_path):
    """A member whose process always exits is restarted with backoff, then given up (fake clock)."""
    cluster = EtcdCluster(size=3, data_dir=str(tmp_path), binary="/bin/false")
    lines: list[str] = []
    policy = RestartPolicy(max_restarts=3, window_s=100.0, backoff_s=1.0, max_backoff_s=3.0)
    supervisor = Supervisor(cluster, policy, lines.append)  # not started: driven by check(now)
    member = cluster.members[1]
    try:
        member.launch()
        member.process.wait()
        now = 0.0
        for _ in range(60):
            supervisor.check(now)
            member.process.wait()  # /bin/false ends at once
            now += 0.5
        assert supervisor.restarts["m1"] == 3 and supervisor.given_up == {"m1"}, lines
        assert not supervisor.quorum_lost()  # one of three down: the others still make a quorum
        delays = [line.split("restarting it in ")[1] for line in lines if "restarting it in" in line]
        assert delays == ["1 s", "2 s", "3 s"], lines
        assert "leaving it down" in lines[-1]
        supervisor.given_up.add("m2")
        assert supervisor.quorum_lost()
    finally:
        cluster.stop()


def test_stopped_members_are_not_restarted(tmp_path):
    cluster = EtcdCluster(size=1, data_dir=str(tmp_path), binary="/bin/false")
    supervisor = Supervisor(cluster, RestartPolicy(), lambda line: None)
    cluster.members[0].launch()
    cluster.members[0].stop()  # deliberate: forgets the process
    for now in range(10):
        supervisor.check(float(now))
    assert supervisor.restarts == {"m0": 0} and cluster.members[0].process is None
    cluster.stop()


# -- the binary, its version, and `omega etcd up`'s port ---------------------------------------------

def test_etcd_bin_is_preferred_and_its_version_read(tmp_path, monkeypatch):
    from cellstate.etcd.binary import binary_version, find_etcd_binary

    fake = tmp_path / "etcd"
    fake.write_text("#!/bin/sh\necho 'etcd Version: 3.9.7'\necho 'Git SHA: x'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ETCD_BIN", str(fake))
    assert find_etcd_binary() == str(fake)
    assert binary_version(str(fake)) == "3.9.7"
    assert EtcdCluster(size=1, data_dir=str(tmp_path / "d")).version == "3.9.7"
    fake.write_text("#!/bin/sh\necho hello\n")
    with pytest.raises(EtcdError, match="no 'etcd Version:' line"):
        binary_version(str(fake))


@pytest.mark.parametrize("version, warned", [
    ("3.5.0", True), ("3.5.1", True), ("3.5.2", True), ("3.5.3", False), ("3.4.23", False), ("3.6.14", False),
])
def test_versions_not_for_production_are_named(version, warned):
    from cellstate.etcd.binary import version_note

    note = version_note(version)
    assert (note is not None) == warned
    if warned:
        assert "etcd#13766" in note and "ETCD_BIN" in note


@pytest.mark.parametrize("argv, recorded, expected", [
    ([], False, 2379), (["--port", "0"], False, None), (["--port", "2400"], False, 2400), ([], True, None),
], ids=["default-2379", "zero-free", "given", "recorded"])
def test_etcd_up_client_port(tmp_path, argv, recorded, expected):
    from tools.cli import build_parser
    from tools.cli.etcd import client_port

    if recorded:
        (tmp_path / CLUSTER_FILE).write_text("{}")
    args = build_parser().parse_args(["etcd", "up", *argv])
    assert client_port(args, tmp_path) == expected


def test_etcd_up_port_errors_say_what_to_do():
    from tools.cli import UsageError, build_parser
    from tools.cli.etcd import client_port, port_in_use_hint

    with pytest.raises(UsageError, match="--port must be 0..65535"):
        client_port(build_parser().parse_args(["etcd", "up", "--port", "70000"]), None)
    taken = EtcdError("port 2379 on 127.0.0.1 is already in use (Address already in use)")
    hint = port_in_use_hint(taken, build_parser().parse_args(["etcd", "up"]))
    assert "is an etcd running already?" in hint and "--port 0" in hint and "OMEGA_ENDPOINTS=127.0.0.1:2379" in hint
    assert port_in_use_hint(taken, build_parser().parse_args(["etcd", "up", "--port", "2379"])) == str(taken)


def test_etcd_up_refuses_a_taken_port(capsys):
    from tools.cli import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            main(["etcd", "up", "--port", str(port), "--no-fsync"])
    assert exit_.value.code == 2 and f"port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err


@pytest.mark.slow
def test_etcd_up_prints_binary_version_and_export_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from cellstate.etcd.binary import binary_version, find_etcd_binary

    repo = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-m", "tools.cli", "etcd", "up", "--port", "0", "--no-fsync"],
                               cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=sigint_default)
    try:
        lines = [process.stdout.readline() for _ in range(5)]
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    text = "".join(lines)
    endpoint = text.split("endpoints: ")[1].split()[0]
    binary = find_etcd_binary()
    assert f"  etcd {binary_version(binary)} ({binary})\n" in lines, text
    assert f"  export OMEGA_ENDPOINTS={endpoint}\n" in lines, text


@pytest.mark.slow
def test_etcd_up_interrupted_while_announcing_stops_etcd(tmp_path):
    """Ctrl-C after etcd started but before the serve loop took the signals over (here: as soon
    as the first line is out) stops etcd too: nothing is left holding the output pipe."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-m", "tools.cli", "etcd", "up", "--port", "0", "--no-fsync"],
                               cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=sigint_default)
    try:
        first = process.stdout.readline()
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)  # EOF: no etcd child holds the pipe any more
    finally:
        if process.poll() is None:
            process.kill()
    assert "endpoints: " in first and process.returncode in (0, 130), out


def sigint_default() -> None:
    """In the child: SIGINT back to its default. A test run started in the background by a shell
    without job control ignores SIGINT, and an ignored disposition is inherited across exec, so
    a Ctrl-C sent before the command installs its own handler would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
