"""An etcd with TLS, auth and ``--client-cert-auth`` (mTLS): every component presents the client
certificate of its credential file, and nothing without a certificate connects."""

from __future__ import annotations

import shutil
import ssl
import urllib.error
import urllib.request

import pytest

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.store import EtcdStore
from cellstate.security import CREDENTIALS_DIR, AuthAdmin, SecurityError, load_credentials, secure_cells, secure_options
from cellstate.store import Delete, StoreError, Unavailable

CELL = "m"


@pytest.fixture(scope="module")
def mtls_etcd(tmp_path_factory):
    """(cluster, credentials directory) of a one-member etcd with mTLS and auth for cell m."""
    root = tmp_path_factory.mktemp("mtls-etcd")
    cluster = EtcdCluster(size=1, options=secure_options(root / "pki", client_cert_auth=True, unsafe_no_fsync=True),
                          data_dir=str(root / "data"), metrics=True)
    cluster.start()
    try:
        secure_cells(cluster.endpoints, [CELL], root / CREDENTIALS_DIR, ca_cert=cluster.ca_cert,
                     client_certs_from=root / "pki")
        yield cluster, root / CREDENTIALS_DIR
    finally:
        cluster.stop()


def test_each_component_connects_with_its_own_certificate(mtls_etcd, tmp_path):
    cluster, creds = mtls_etcd
    # the files travel together: the monitor's file, certificate and key, and the CA, elsewhere
    for name in ("m-monitor.json", "m-monitor.pem", "m-monitor.key"):
        shutil.copy2(creds / name, tmp_path / name)
    monitor = load_credentials(tmp_path / "m-monitor.json")
    assert monitor.users["m-monitor"].cert == str(tmp_path / "m-monitor.pem")
    with EtcdStore(cluster.urls, **monitor.store_kwargs("m-monitor")) as store:
        assert store.revision() > 0
    with EtcdStore(cluster.urls, **load_credentials(creds / "m-scheduler.json").store_kwargs("m-scheduler")) as store:
        store.put(f"/omega/cells/{CELL}/jobs/x", b"1")


def test_nothing_without_a_certificate_connects(mtls_etcd):
    cluster, creds = mtls_etcd
    kwargs = load_credentials(creds / "m-monitor.json").store_kwargs("m-monitor")
    password_only = {k: v for k, v in kwargs.items() if k not in ("cert", "key")}
    with pytest.raises((Unavailable, StoreError)):
        with EtcdStore(cluster.endpoints, timeout=2.0, **password_only) as store:
            store.revision()
    with pytest.raises(SecurityError):
        with AuthAdmin(cluster.endpoints, cluster.ca_cert, timeout=2.0) as admin:
            admin.revision()
    # etcd's /metrics on the client port sits behind the client certificates too
    context = ssl.create_default_context(cafile=cluster.ca_cert)
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"{cluster.urls[0]}/metrics", timeout=5, context=context).read()
    context.load_cert_chain(str(creds / "m-monitor.pem"), str(creds / "m-monitor.key"))
    assert b"etcd_server_has_leader" in urllib.request.urlopen(f"{cluster.urls[0]}/metrics", timeout=5,
                                                                context=context).read()
    # ... and on the loopback listener of its own, plain HTTP for a local scraper
    local = cluster.members[0].metrics_url
    assert local.startswith("http://127.0.0.1:")
    assert b"etcd_server_has_leader" in urllib.request.urlopen(f"{local}/metrics", timeout=5).read()


def test_client_certificates_are_reused_on_a_second_run(mtls_etcd):
    cluster, creds = mtls_etcd
    before = (creds / "m-agent.pem").read_bytes()
    secure_cells(cluster.endpoints, [CELL], creds, ca_cert=cluster.ca_cert,
                 client_certs_from=creds.parent / "pki")
    assert (creds / "m-agent.pem").read_bytes() == before


def test_the_public_ca_alone_reaches_no_admin_call(mtls_etcd):
    import grpc
    import etcd3.etcdrpc as rpc

    cluster, creds = mtls_etcd
    channel = grpc.secure_channel(cluster.endpoints[0],
                                  grpc.ssl_channel_credentials(open(cluster.ca_cert, "rb").read()))
    try:
        for call in (lambda: rpc.KVStub(channel).Compact(rpc.CompactionRequest(revision=1), 3),
                     lambda: rpc.LeaseStub(channel).LeaseTimeToLive(rpc.LeaseTimeToLiveRequest(ID=1, keys=True), 3),
                     lambda: rpc.ClusterStub(channel).MemberList(rpc.MemberListRequest(), 3)):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        channel.close()


def test_a_certificate_without_a_password_acts_as_its_common_name(mtls_etcd):
    from cellstate.store import PermissionDenied

    cluster, creds = mtls_etcd
    with EtcdStore(cluster.urls, ca_cert=str(creds / "ca.pem"), cert=str(creds / "m-monitor.pem"),
                   key=str(creds / "m-monitor.key")) as store:
        assert store.range(f"/omega/cells/{CELL}/").revision > 0
        with pytest.raises(PermissionDenied):
            store.put(f"/omega/cells/{CELL}/jobs/y", b"1")  # m-monitor reads only


def test_login_passes_over_a_dead_first_endpoint(mtls_etcd, monkeypatch):
    import importlib

    from cellstate.etcd.ports import free_port

    cluster, creds = mtls_etcd
    monkeypatch.setattr(importlib.import_module("etcd3.client").random, "choice", lambda labels: labels[0])
    dead = f"https://127.0.0.1:{free_port()}"
    kwargs = load_credentials(creds / "m-monitor.json").store_kwargs("m-monitor")
    with EtcdStore([dead, *cluster.urls], timeout=2.0, **kwargs) as store:
        assert store.revision() > 0


def test_a_replay_on_the_secure_etcd_presents_its_certificate(mtls_etcd, capsys):
    """``omega replay --store etcd`` takes the same TLS and login flags as every store command;
    the credentials stay out of its result."""
    import json
    from pathlib import Path

    from tools.cli import main

    cluster, creds = mtls_etcd
    scheduler = load_credentials(creds / "m-scheduler.json").store_kwargs("m-scheduler")
    with EtcdStore(cluster.urls, **scheduler) as store:  # a replay needs an empty cell: clear m
        store.txn((), [Delete(f"/omega/cells/{CELL}/", prefix=True)])
    trace = Path(__file__).resolve().parent.parent / "data" / "traces" / "sweep" / "tiny-a.omt.gz"
    argv = ["replay", str(trace), "--store", "etcd", "--endpoints", ",".join(cluster.urls), "--cell", CELL]
    assert main([*argv, "--cacert", cluster.ca_cert]) == 1  # no certificate: refused, one line
    err = capsys.readouterr().err.strip()
    assert err.startswith("omega: replay:") and "\n" not in err, err
    assert main([*argv, "--credentials", str(creds / "m-scheduler.json"), "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["jobs_submitted"] > 0 and result["check"]["ok"], result["check"]
    assert "store_auth" not in result["config"] and "password" not in json.dumps(result)
