"""Connected defaults: $OMEGA_CELL, an unknown cell named as an error (with the cells that
exist), one-line hints for an unreachable etcd, a TLS etcd reached without its CA and a plain
etcd reached with one, and `scheduler run` waiting for etcd with one warning then progress."""

from __future__ import annotations

import argparse
import logging
import socket

import pytest
from cli_helpers import run_cli

from tools.cli.common import add_store_args


def _dead_endpoint() -> str:
    with socket.socket() as s:  # a loopback port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def live_cell(etcd_server, cell_keys):
    """A cell initialised with 3 machines; (endpoint args, its name)."""
    args = ["--endpoints", etcd_server.endpoints[0]]
    assert run_cli(["cell", "init", "--machines", "3", "--cell", cell_keys.cell, *args])[0] == 0
    return args, cell_keys.cell


def test_omega_cell_sets_the_default_cell(monkeypatch):
    parser = argparse.ArgumentParser()
    monkeypatch.setenv("OMEGA_CELL", "prod")
    add_store_args(parser)
    assert parser.parse_args([]).cell == "prod"
    assert parser.parse_args(["--cell", "x"]).cell == "x"
    monkeypatch.delenv("OMEGA_CELL")
    parser = argparse.ArgumentParser()
    add_store_args(parser)
    assert parser.parse_args([]).cell == "default"


def test_omega_cell_reaches_the_commands(monkeypatch, live_cell):
    args, cell = live_cell
    monkeypatch.setenv("OMEGA_CELL", cell)
    status, out, _ = run_cli(["check", *args])
    assert status == 0 and f"cell {cell!r}" in out


UNKNOWN_CELL_COMMANDS = {
    "check": ["check"],
    "submit": ["submit", "{jobs}", "--retry-for", "0"],
    "kill": ["kill", "j"],
    "job-list": ["job", "list"],
    "job-status": ["job", "status", "j"],
    "explain": ["explain", "j"],
    "monitor": ["monitor", "--once"],
    "record": ["record", "--out", "{tmp}/r.omt", "--duration", "0.1"],
    "agents": ["agents", "run", "--run-for", "0.1"],
    "scheduler": ["scheduler", "run", "--kind", "batch", "--duration", "0.1"],
    "generate": ["generate", "--submit", "--duration", "0.1", "--retry-for", "0"],
}


@pytest.mark.parametrize("name", list(UNKNOWN_CELL_COMMANDS))
def test_an_unknown_cell_is_an_error_naming_the_cells_that_exist(name, live_cell, etcd_store, tmp_path):
    args, cell = live_cell
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('id = "j"\nkind = "batch"\ntasks = 1\ncpu = 1\nmemory = 1\n')
    argv = [a.format(jobs=jobs, tmp=tmp_path) for a in UNKNOWN_CELL_COMMANDS[name]]
    before = etcd_store.revision()
    status, out, err = run_cli([*argv, "--cell", f"{cell}-typo", *args])
    assert status == 1, (out, err)
    assert err.count("\n") == 1 and f"no cell '{cell}-typo'" in err and cell in err.split("(cells: ")[1], err
    assert err.startswith(f"omega: {' '.join(argv[:2]) if argv[0] in ('job', 'scheduler', 'agents') else argv[0]}:")
    assert etcd_store.range(f"/omega/cells/{cell}-typo/").kvs == ()
    assert not (tmp_path / "r.omt").exists()
    assert etcd_store.revision() == before  # nothing written anywhere


def test_commands_that_create_a_cell_stay_allowed(etcd_server, cell_keys, etcd_store):
    args = ["--endpoints", etcd_server.endpoints[0], "--cell", cell_keys.cell]
    status, out, err = run_cli(["agents", "run", "--init-machines", "2", "--run-for", "0.1", *args])
    assert status == 0, err
    assert "registered 2 machines" in out


def test_submit_to_an_existing_cell_still_works(live_cell, tmp_path, etcd_store):
    args, cell = live_cell
    assert run_cli(["job", "init", str(tmp_path / "jobs.toml")])[0] == 0
    status, out, err = run_cli(["submit", str(tmp_path / "jobs.toml"), "--cell", cell, *args])
    assert status == 0 and "submitted 2 job(s)" in out, err


def test_an_unreachable_etcd_says_what_to_do():
    dead = _dead_endpoint()
    status, _, err = run_cli(["check", "--endpoints", dead])
    assert status == 1
    assert err == (f"omega: check: cannot reach etcd at {dead} (connection refused): start one with "
                   "`omega etcd up`, or point --endpoints / $OMEGA_ENDPOINTS at a running etcd\n")


def test_submit_gives_up_on_an_unreachable_etcd_with_the_hint(tmp_path):
    dead = _dead_endpoint()
    jobs = tmp_path / "jobs.toml"
    jobs.write_text('id = "j"\nkind = "batch"\ntasks = 1\ncpu = 1\nmemory = 1\n')
    status, _, err = run_cli(["submit", str(jobs), "--endpoints", dead, "--retry-for", "0"])
    assert status == 1
    assert err.strip().splitlines()[-1].startswith(f"omega: submit: cannot reach etcd at {dead} (connection "
                                                   "refused): start one with `omega etcd up`")


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory):
    """A TLS-only etcd (no auth) and its CA certificate."""
    from cellstate.etcd.cluster import EtcdCluster
    from cellstate.security import secure_options

    pki = tmp_path_factory.mktemp("pki")
    cluster = EtcdCluster(size=1, options=secure_options(pki, unsafe_no_fsync=True))
    cluster.start()
    yield cluster, str(pki / "ca.pem")
    cluster.stop()


@pytest.mark.slow
def test_a_tls_etcd_without_its_ca_says_to_pass_it(tls_etcd):
    cluster, ca = tls_etcd
    endpoint = cluster.endpoints[0].split("://")[-1]
    status, _, err = run_cli(["check", "--endpoints", endpoint])
    assert status == 1
    assert err == (f"omega: check: etcd at {endpoint} closed the connection: it probably serves TLS; pass "
                   "--ca-cert PEM (or --credentials FILE --as USER, written by `omega cell up --secure`)\n")
    # With the CA the same command gets through (to the cell check: none exists there).
    status, _, err = run_cli(["check", "--endpoints", endpoint, "--ca-cert", ca])
    assert status == 1 and "no cell 'default'" in err, err


@pytest.mark.slow
def test_a_plain_etcd_reached_with_a_ca_says_so(tls_etcd, etcd_server):
    _, ca = tls_etcd
    status, _, err = run_cli(["check", "--endpoints", etcd_server.endpoints[0], "--ca-cert", ca])
    assert status == 1 and err.count("\n") == 1
    assert err.startswith(f"omega: check: TLS handshake with etcd at {etcd_server.endpoints[0]} failed: is it a "
                          "plain (non-TLS) etcd"), err


def test_scheduler_waiting_for_etcd_warns_once_then_prints_progress(monkeypatch, caplog):
    import tools.cli.scheduler as cmd

    monkeypatch.setattr(cmd, "WAIT_PROGRESS_EVERY_S", 1.0)
    dead = _dead_endpoint()
    with caplog.at_level(logging.WARNING, logger="tools.cli.scheduler"):
        status, _, err = run_cli(["scheduler", "run", "--kind", "batch", "--endpoints", dead,
                                  "--startup-timeout", "3.2"])
    assert status == 1 and "cannot reach etcd" in err
    lines = [r.getMessage() for r in caplog.records if r.name == "tools.cli.scheduler"]
    assert lines[0].startswith("waiting up to 3.2 s (--startup-timeout) for etcd: cannot reach etcd at")
    assert 2 <= len(lines[1:]) <= 3 and all(line.startswith("still waiting for etcd: ") for line in lines[1:]), lines


def test_a_dead_first_endpoint_is_passed_over(monkeypatch, live_cell):
    import importlib

    client_module = importlib.import_module("etcd3.client")  # (the package's ``client`` is a function)
    args, cell = live_cell
    monkeypatch.setattr(client_module.random, "choice", lambda labels: labels[0])  # start on the dead one
    status, out, err = run_cli(["check", "--endpoints", f"{_dead_endpoint()},{args[1]}", "--cell", cell])
    assert status == 0 and f"cell {cell!r}" in out, err
