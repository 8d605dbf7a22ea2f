"""The connection flags of every store command: the endpoint scheme, --cacert, --cert/--key and
their environment defaults; bad combinations are one-line usage errors (exit 2)."""

from __future__ import annotations

import argparse

import pytest

from tools.cli import main
from tools.cli.common import add_store_args, store_auth

ENV = ("OMEGA_CA_CERT", "OMEGA_CACERT", "OMEGA_CERT", "OMEGA_KEY", "OMEGA_USER", "OMEGA_PASSWORD",
       "OMEGA_CREDENTIALS", "OMEGA_AS", "OMEGA_ENDPOINTS")


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def pems(tmp_path):
    for name in ("ca.pem", "c.pem", "c.key"):
        (tmp_path / name).write_text("not a certificate\n")
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["--endpoints", "https://127.0.0.1:1"], "https:// endpoints need the CA certificate"),
    (["--endpoints", "http://127.0.0.1:1", "--cacert", "{d}/ca.pem"], "http:// endpoints are plain text"),
    (["--endpoints", "https://127.0.0.1:1,http://127.0.0.1:2"], "mix schemes"),
    (["--endpoints", "https://127.0.0.1:1,127.0.0.1:2", "--cacert", "{d}/ca.pem"], "mix schemes"),
    (["--endpoints", "unix://127.0.0.1:1"], "scheme must be http:// or https://"),
    (["--cert", "{d}/c.pem"], "--cert needs --key"),
    (["--key", "{d}/c.key"], "--cert needs --key"),
    (["--endpoints", "127.0.0.1:1", "--cert", "{d}/c.pem", "--key", "{d}/c.key"], "needs TLS: give the CA"),
    (["--endpoints", "https://127.0.0.1:1", "--cacert", "{d}/missing.pem"], "cannot read etcd CA certificate"),
])
def test_bad_connection_flags_are_one_line_usage_errors(pems, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["check", *[a.replace("{d}", str(pems)) for a in argv]])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_store_args(parser)
    return parser.parse_args(argv)


def test_client_certificate_flags_and_their_environment(monkeypatch):
    assert store_auth(parse(["--cacert", "/ca.pem", "--cert", "/c.pem", "--key", "/c.key"])) == {
        "user": None, "password": None, "ca_cert": "/ca.pem", "cert": "/c.pem", "key": "/c.key"}
    monkeypatch.setenv("OMEGA_CACERT", "/env-ca.pem")
    monkeypatch.setenv("OMEGA_CERT", "/env.pem")
    monkeypatch.setenv("OMEGA_KEY", "/env.key")
    assert store_auth(parse([])) == {"user": None, "password": None, "ca_cert": "/env-ca.pem",
                                     "cert": "/env.pem", "key": "/env.key"}
    assert parse(["--ca-cert", "/old-spelling.pem"]).ca_cert == "/old-spelling.pem"


def test_cert_flags_override_the_credentials_file(tmp_path):
    from cellstate.security import Credentials, UserCredential, save_credentials

    save_credentials(tmp_path / "a-agent.json", Credentials(
        ("127.0.0.1:1",), "ca.pem", "/omega",
        {"a-agent": UserCredential("a-agent", "pw", "a-writer", "a", str(tmp_path / "a-agent.pem"),
                                   str(tmp_path / "a-agent.key"))}))
    from_file = store_auth(parse(["--credentials", str(tmp_path / "a-agent.json"), "--cell", "a"]))
    assert from_file == {"user": "a-agent", "password": "pw", "ca_cert": str(tmp_path / "ca.pem"),
                         "cert": str(tmp_path / "a-agent.pem"), "key": str(tmp_path / "a-agent.key")}
    mine = store_auth(parse(["--credentials", str(tmp_path / "a-agent.json"), "--cell", "a",
                             "--cert", "/mine.pem", "--key", "/mine.key"]))
    assert mine["cert"] == "/mine.pem" and mine["key"] == "/mine.key" and mine["user"] == "a-agent"


def test_client_cert_auth_needs_secure(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cell", "up", "--client-cert-auth", "--port", "0"])
    assert exit_.value.code == 2 and "--client-cert-auth needs --secure" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--listen", "etcd.example"], "--listen must be an IP address"),
    (["--name", "m1"], "--name and --initial-cluster go together"),
    (["--name", "m1", "--initial-cluster", "m1=10.77.0.1:2380", "--members", "3"],
     "--members and --initial-cluster do not go together"),
])
def test_bad_host_flags_are_usage_errors(capsys, argv, message):
    for command in (["etcd", "up"], ["cell", "up"]):
        with pytest.raises(SystemExit) as exit_:
            main([*command, *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_cell_certs_names_the_hosts_and_issues_client_certificates(tmp_path, capsys):
    from cellstate.pki import cert_hosts, client_cert_valid

    data = tmp_path / "data"
    assert main(["cell", "certs", "--data-dir", str(data), "--host", "10.77.0.1", "--host", "etcd-2.example",
                 "--client", "operator"]) == 0
    out = capsys.readouterr().out
    assert "10.77.0.1, 127.0.0.1, etcd-2.example, localhost" in out and "never ca.key" in out
    assert cert_hosts(data / "pki" / "server.pem") == {"10.77.0.1", "etcd-2.example", "127.0.0.1", "localhost"}
    assert client_cert_valid(data / "pki", data / "credentials" / "operator.pem",
                             data / "credentials" / "operator.key", "operator")
    with pytest.raises(SystemExit) as exit_:
        main(["cell", "certs", "--data-dir", str(data), "--client", "ca"])
    assert exit_.value.code == 2 and "--client 'ca'" in capsys.readouterr().err
