"""The local PKI (cellstate.pki) and the launcher's TLS options (no etcd needed)."""

from __future__ import annotations

import ipaddress
import os
import stat

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from cellstate.etcd.binary import EtcdError
from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions, TlsFiles
from cellstate.pki import PkiError, ensure_jwt_keys, ensure_local_pki, issue_cert, make_ca


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(open(path, "rb").read())


def test_local_pki_keys_are_private_and_server_cert_names_loopback(tmp_path):
    pki = ensure_local_pki(tmp_path / "pki")
    assert mode(tmp_path / "pki") == 0o700
    assert mode(pki.server.key) == 0o600 and mode(tmp_path / "pki" / "ca.key") == 0o600
    server, ca = load(pki.server.cert), load(pki.ca_cert)
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_ensure_local_pki_reuses_files_and_replaces_missing_ones(tmp_path):
    first = ensure_local_pki(tmp_path)
    ca_bytes, server_bytes = open(first.ca_cert, "rb").read(), open(first.server.cert, "rb").read()
    assert open(ensure_local_pki(tmp_path).server.cert, "rb").read() == server_bytes
    os.remove(first.server.key)
    again = ensure_local_pki(tmp_path)
    assert open(again.ca_cert, "rb").read() == ca_bytes  # the CA is kept
    assert open(again.server.cert, "rb").read() != server_bytes
    load(again.server.cert).verify_directly_issued_by(load(again.ca_cert))


def test_new_ca_reissues_server_cert(tmp_path):
    first = ensure_local_pki(tmp_path)
    os.remove(first.ca_cert)
    again = ensure_local_pki(tmp_path)
    load(again.server.cert).verify_directly_issued_by(load(again.ca_cert))


def test_client_cert_for_a_user(tmp_path):
    make_ca(tmp_path)
    files = issue_cert(tmp_path, "a-monitor", hosts=(), server=False)
    cert = load(files.cert)
    assert cert.subject.rfc4514_string() == "CN=a-monitor"
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert mode(files.key) == 0o600


@pytest.mark.parametrize("kwargs, message", [
    ({"name": ""}, "non-empty file name"),
    ({"name": "ca"}, "other than 'ca'"),
    ({"name": "x/y"}, "non-empty file name"),
    ({"name": "x", "server": False, "client": False}, "needs server or client usage"),
], ids=["empty-name", "ca-name", "slash", "no-usage"])
def test_issue_cert_rejects_bad_requests(tmp_path, kwargs, message):
    make_ca(tmp_path)
    with pytest.raises(PkiError, match=message):
        issue_cert(tmp_path, **kwargs)


def test_issue_cert_without_ca_names_the_directory(tmp_path):
    with pytest.raises(PkiError, match="cannot load the CA"):
        issue_cert(tmp_path, "server")


def test_jwt_keys_are_made_once(tmp_path):
    private, public = ensure_jwt_keys(tmp_path)
    before = open(private, "rb").read()
    assert ensure_jwt_keys(tmp_path) == (private, public)
    assert open(private, "rb").read() == before and mode(private) == 0o600


# -- launcher options ---------------------------------------------------------------------------------

def command_of(options: EtcdOptions, tmp_path) -> list[str]:
    cluster = EtcdCluster(size=1, options=options, data_dir=str(tmp_path / "data"), binary="/bin/true")
    return cluster.members[0].command()


def flag_value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_plain_options_keep_http_and_no_tls_flags(tmp_path):
    command = command_of(EtcdOptions(), tmp_path)
    assert flag_value(command, "--listen-client-urls").startswith("http://127.0.0.1:")
    assert not any(arg.startswith("--cert") or "peer-cert" in arg or "trusted" in arg for arg in command)


@pytest.mark.parametrize("client_cert_auth, expect_ca_flag", [(False, False), (True, True)],
                         ids=["server-tls", "mutual-tls"])
def test_tls_options_switch_urls_and_flags(tmp_path, client_cert_auth, expect_ca_flag):
    tls = ensure_local_pki(tmp_path / "pki").server
    command = command_of(EtcdOptions(tls=tls, client_cert_auth=client_cert_auth), tmp_path)
    for flag in ("--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls",
                 "--initial-advertise-peer-urls"):
        assert flag_value(command, flag).startswith("https://127.0.0.1:"), flag
    assert flag_value(command, "--cert-file") == tls.cert and flag_value(command, "--key-file") == tls.key
    assert flag_value(command, "--peer-trusted-ca-file") == tls.ca
    assert ("--trusted-ca-file" in command) is expect_ca_flag
    assert ("--client-cert-auth" in command) is expect_ca_flag


def test_missing_tls_file_is_named(tmp_path):
    tls = TlsFiles(str(tmp_path / "ca.pem"), str(tmp_path / "s.pem"), str(tmp_path / "s.key"))
    with pytest.raises(EtcdError, match="CA certificate .*ca.pem"):
        EtcdCluster(size=1, options=EtcdOptions(tls=tls), data_dir=str(tmp_path / "d"), binary="/bin/true")


def test_client_cert_auth_without_tls_is_refused(tmp_path):
    with pytest.raises(EtcdError, match="client_cert_auth needs tls"):
        command_of(EtcdOptions(client_cert_auth=True), tmp_path)


def test_server_cert_names_the_advertised_hosts_and_is_reissued_for_a_new_one(tmp_path):
    from cellstate.pki import cert_hosts

    first = ensure_local_pki(tmp_path / "pki", hosts=["10.77.0.1", "etcd-2.example"])
    assert cert_hosts(first.server.cert) == {"127.0.0.1", "localhost", "10.77.0.1", "etcd-2.example"}
    ca_bytes = open(first.ca_cert, "rb").read()
    again = ensure_local_pki(tmp_path / "pki", hosts=["10.77.0.3"])
    assert "10.77.0.3" in cert_hosts(again.server.cert) and open(again.ca_cert, "rb").read() == ca_bytes


def test_a_member_host_without_the_ca_key_uses_the_copied_files_and_never_makes_a_new_ca(tmp_path):
    source = ensure_local_pki(tmp_path / "ca-host", hosts=["10.77.0.1", "10.77.0.2"])
    member = tmp_path / "member"
    member.mkdir(mode=0o700)
    for name in ("ca.pem", "server.pem", "server.key"):
        (member / name).write_bytes((tmp_path / "ca-host" / name).read_bytes())
    copied = ensure_local_pki(member, hosts=["10.77.0.2"])
    assert open(copied.server.cert, "rb").read() == open(source.server.cert, "rb").read()
    with pytest.raises(PkiError, match=r"server.pem does not name 10.77.0.9, and .*ca.key is not here"):
        ensure_local_pki(member, hosts=["10.77.0.9"])
    assert not (member / "ca.key").exists()


def test_client_cert_issued_elsewhere_with_a_user_common_name(tmp_path):
    from cellstate.pki import client_cert_valid

    make_ca(tmp_path / "pki")
    files = issue_cert(tmp_path / "pki", "admin", hosts=(), server=False, out=tmp_path / "creds", common_name="root")
    assert files.cert == str(tmp_path / "creds" / "admin.pem") and mode(files.key) == 0o600
    assert client_cert_valid(tmp_path / "pki", files.cert, files.key, "root")
    assert not client_cert_valid(tmp_path / "pki", files.cert, files.key, "admin")
    make_ca(tmp_path / "other")
    assert not client_cert_valid(tmp_path / "other", files.cert, files.key, "root")
