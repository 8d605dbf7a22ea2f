"""``omega cell up --secure`` and the store auth flags (--credentials/--as, --user/--password-file)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.cli import UsageError, main
from tools.cli.common import add_store_args, store_auth

REPO = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_store_args(parser)
    return parser.parse_args(argv)


@pytest.fixture
def no_auth_env(monkeypatch):
    for name in ("OMEGA_CA_CERT", "OMEGA_USER", "OMEGA_PASSWORD", "OMEGA_CREDENTIALS", "OMEGA_AS", "OMEGA_CELL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def creds_file(tmp_path):
    from cellstate.security import Credentials, UserCredential, save_credentials

    path = tmp_path / "a-monitor.json"
    save_credentials(path, Credentials(("127.0.0.1:1",), "/pki/ca.pem", "/omega",
                                       {"a-monitor": UserCredential("a-monitor", "pw-m", "a-reader", "a")}))
    save_credentials(tmp_path / "a-scheduler.json", Credentials(
        ("127.0.0.1:1",), "/pki/ca.pem", "/omega",
        {"a-scheduler": UserCredential("a-scheduler", "pw-s", "a-writer", "a")}))
    save_credentials(tmp_path / "admin.json", Credentials(
        ("127.0.0.1:1",), "/pki/ca.pem", "/omega", {"root": UserCredential("root", "pw-r", "root")}))
    (tmp_path / "pw").write_text("from-file\n")
    return path


FLAGS = [
    ([], {}),
    (["--ca-cert", "/x/ca.pem"], {"user": None, "password": None, "ca_cert": "/x/ca.pem"}),
    (["--user", "u", "--password", "p"], {"user": "u", "password": "p", "ca_cert": None}),
    (["--user", "u", "--password-file", "{dir}/pw"], {"user": "u", "password": "from-file", "ca_cert": None}),
    (["--credentials", "{dir}/a-monitor.json", "--cell", "a"],
     {"user": "a-monitor", "password": "pw-m", "ca_cert": "/pki/ca.pem"}),
    (["--credentials", "{dir}/a-monitor.json", "--as", "a-monitor", "--cell", "a"],
     {"user": "a-monitor", "password": "pw-m", "ca_cert": "/pki/ca.pem"}),
    (["--credentials", "{dir}/a-monitor.json", "--cell", "a", "--ca-cert", "/mine.pem"],
     {"user": "a-monitor", "password": "pw-m", "ca_cert": "/mine.pem"}),
    (["--credentials", "{dir}/admin.json", "--cell", "any"],
     {"user": "root", "password": "pw-r", "ca_cert": "/pki/ca.pem"}),
    (["--credentials", "{dir}", "--as", "a-scheduler", "--cell", "a"],
     {"user": "a-scheduler", "password": "pw-s", "ca_cert": "/pki/ca.pem"}),
]


@pytest.mark.parametrize("argv, expected", FLAGS,
                         ids=["none", "ca-only", "user-password", "password-file", "credentials", "credentials-as",
                              "ca-override", "admin-any-cell", "directory-as"])
def test_store_auth_flags(no_auth_env, creds_file, argv, expected):
    argv = [a.replace("{dir}", str(creds_file.parent)) for a in argv]
    assert store_auth(parse(argv)) == expected


BAD_FLAGS = [
    (["--user", "u"], "--user needs --password"),
    (["--password", "p"], "--user needs --password"),
    (["--credentials", "{dir}", "--cell", "a"], "holds 3 users .* choose one with --as"),
    (["--credentials", "{dir}/a-monitor.json", "--as", "root", "--cell", "a"],
     "a-monitor.json is for user 'a-monitor' \\(role a-reader of cell a\\), not 'root'"),
    (["--credentials", "{dir}/a-monitor.json", "--as", "a-scheduler", "--cell", "a"], "is for user 'a-monitor'"),
    (["--credentials", "{dir}/a-monitor.json", "--cell", "b"], "is for user a-monitor of cell 'a', not --cell 'b'"),
    (["--credentials", "{dir}/missing.json", "--as", "a-monitor"], "cannot read credentials file"),
    (["--user", "u", "--password-file", "{dir}/nope"], "--password-file"),
]


@pytest.mark.parametrize("argv, message", BAD_FLAGS,
                         ids=["user-only", "password-only", "directory-no-as", "root-from-monitor-file",
                              "scheduler-from-monitor-file", "other-cell", "missing-file", "no-pw-file"])
def test_store_auth_flag_mistakes(no_auth_env, creds_file, argv, message):
    argv = [a.replace("{dir}", str(creds_file.parent)) for a in argv]
    with pytest.raises(UsageError, match=message):
        store_auth(parse(argv))


def test_namespace_without_auth_flags_means_no_auth():
    assert store_auth(argparse.Namespace(endpoints="127.0.0.1:2379", max_txn_ops=128)) == {}


@pytest.mark.slow
def test_cell_up_secure_serves_cell_users_until_interrupted(tmp_path, no_auth_env, capsys):
    data = tmp_path / "data"
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.cli", "cell", "up", "--secure", "--data-dir", str(data), "--cell", "a",
         "--no-fsync", "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # (a background run ignores SIGINT)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while not any(" member m0 " in line for line in lines):
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            lines.append(process.stdout.readline())
        endpoints = re.search(r"endpoints: (\S+)", "".join(lines)).group(1)
        creds = data / "credentials"
        assert not (data / "credentials.json").exists()
        assert stat.S_IMODE(os.stat(creds / "a-monitor.json").st_mode) == 0o600
        for name in ("metrics-server.pem", "metrics-server.key", "metrics-scraper.pem", "metrics-scraper.key"):
            assert stat.S_IMODE(os.stat(creds / name).st_mode) == 0o600, name  # metrics behind the cell's CA
        assert f"--metrics-cert {creds}/metrics-server.pem" in "".join(lines)
        assert "etcd 3." in "".join(lines) and "export OMEGA_ENDPOINTS=" in "".join(lines)
        common = ["--endpoints", endpoints, "--cell", "a"]
        assert main(["cell", "init", "--machines", "4", *common, "--credentials", str(creds / "a-scheduler.json")]) == 0
        assert main(["check", *common, "--credentials", str(creds / "a-monitor.json")]) == 0
        monitor = ["--credentials", str(creds / "a-monitor.json")]
        assert main(["cell", "init", "--machines", "4", "--replace", *common, *monitor]) == 1
        assert "permission denied" in capsys.readouterr().err
        with pytest.raises(SystemExit) as usage:
            main(["check", *common, *monitor, "--as", "a-scheduler"])
        assert usage.value.code == 2 and "is for user 'a-monitor'" in capsys.readouterr().err
        # a monitor compacting every cell's history (etcd 3.5.1 lets it) is reported while serving
        from cellstate.etcd.store import EtcdStore
        from cellstate.rbac_gaps import rbac_gaps
        from cellstate.security import load_credentials

        with EtcdStore([endpoints], **load_credentials(creds / "a-monitor.json").store_kwargs("a-monitor")) as store:
            revision = store.revision()
            version = re.search(r"  etcd (\d\S*) \(", "".join(lines)).group(1)
            if "admin-apis" in {gap.name for gap in rbac_gaps(version)}:
                store.compact(revision)
                deadline = time.monotonic() + 40
                while not lines[-1].startswith("etcd: ALERT"):
                    assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
                    lines.append(process.stdout.readline())
                assert f"compacted up to revision {revision} " in lines[-1], lines[-1]
    finally:
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and "etcd stopped" in out
