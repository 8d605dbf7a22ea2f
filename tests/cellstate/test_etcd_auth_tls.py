"""EtcdStore against an etcd with authentication or TLS turned on."""

from __future__ import annotations

import time

import pytest

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.store import EtcdStore
from cellstate.store import StoreError, Unavailable


@pytest.fixture
def own_etcd():
    """A private single-member etcd (auth is switched on per test)."""
    cluster = EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True)).start()
    yield cluster
    cluster.stop()


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Unavailable:
            pass
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


# -- authentication -------------------------------------------------------------------------------

def enable_auth(endpoint: str, password: str) -> None:
    """Create user root (role root) and turn etcd authentication on."""
    import grpc
    import etcd3.etcdrpc as rpc

    with grpc.insecure_channel(endpoint) as channel:
        auth = rpc.AuthStub(channel)
        auth.RoleAdd(rpc.AuthRoleAddRequest(name="root"), 5)
        auth.UserAdd(rpc.AuthUserAddRequest(name="root", password=password), 5)
        auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"), 5)
        auth.AuthEnable(rpc.AuthEnableRequest(), 5)


def test_authenticated_store_reads_writes_and_watches(own_etcd):
    enable_auth(own_etcd.endpoints[0], "s3cret")
    store = EtcdStore(own_etcd.endpoints, user="root", password="s3cret")
    try:
        stream = store.watch("/auth/", store.revision() + 1)
        revision = store.put("/auth/k", b"v")
        assert store.get("/auth/k").value == b"v"
        assert stream.next(timeout=5).revision == revision
        stream.cancel()
    finally:
        store.close()


@pytest.mark.parametrize("credentials, message", [
    ({"user": "root", "password": "wrong"}, "authentication failed"),
    ({}, "user name is empty"),
], ids=["wrong-password", "anonymous"])
def test_auth_failures_are_store_errors(own_etcd, credentials, message):
    enable_auth(own_etcd.endpoints[0], "s3cret")
    with pytest.raises(StoreError, match=message):
        store = EtcdStore(own_etcd.endpoints, **credentials)
        try:
            store.get("/auth/k")
        finally:
            store.close()


@pytest.fixture
def short_token_etcd():
    """A private etcd whose simple auth tokens expire after 1 s without use."""
    cluster = EtcdCluster(size=1, options=EtcdOptions(unsafe_no_fsync=True,
                                                     extra_args=["--auth-token-ttl", "1"])).start()
    yield cluster
    cluster.stop()


def test_store_renews_an_expired_token_for_calls_leases_and_watches(short_token_etcd):
    import grpc
    import etcd3.etcdrpc as rpc

    enable_auth(short_token_etcd.endpoints[0], "s3cret")
    store = EtcdStore(short_token_etcd.endpoints, user="root", password="s3cret")
    try:
        lease = store.grant_lease(30)
        first_token = store._metadata
        time.sleep(3)  # the token expires
        with grpc.insecure_channel(short_token_etcd.endpoints[0]) as channel:
            with pytest.raises(grpc.RpcError, match="invalid auth token"):
                rpc.KVStub(channel).Range(rpc.RangeRequest(key=b"/auth/k"), 5, metadata=first_token)
        revision = store.put("/auth/k", b"v")           # a unary call renews it
        assert store._metadata != first_token
        time.sleep(3)
        store.refresh_lease(lease)                       # so does a keep-alive
        time.sleep(3)
        stream = store.watch("/auth/", revision + 1)     # and opening a watch
        later = store.put("/auth/k", b"w")
        assert stream.next(timeout=5).revision == later
        stream.cancel()
    finally:
        store.close()


# -- TLS ----------------------------------------------------------------------------------------

def make_certificates(directory) -> tuple[str, str, str]:
    """(ca.pem, server.pem, server.key): a throwaway CA and a server certificate for 127.0.0.1."""
    import subprocess

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "1", "-subj", "/CN=omega-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "1", "-extfile", "san.cnf")
    return tuple(str(directory / name) for name in ("ca.pem", "server.pem", "server.key"))


@pytest.fixture
def tls_etcd(tmp_path):
    """(endpoint, ca.pem) of an etcd serving clients over TLS only."""
    import shutil
    import subprocess

    from cellstate.etcd.binary import find_etcd_binary
    from cellstate.etcd.ports import free_port

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make test certificates")
    ca, cert, key = make_certificates(tmp_path)
    client, peer = free_port(), free_port()
    process = subprocess.Popen([
        find_etcd_binary(), "--name", "tls", "--data-dir", str(tmp_path / "data"),
        "--listen-client-urls", f"https://127.0.0.1:{client}", "--advertise-client-urls", f"https://127.0.0.1:{client}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"tls=http://127.0.0.1:{peer}", "--cert-file", cert, "--key-file", key,
        "--listen-metrics-urls", "", "--log-level", "warn", "--unsafe-no-fsync",
    ], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield f"127.0.0.1:{client}", ca
    finally:
        process.kill()
        process.wait()


def test_tls_store_with_ca_certificate(tls_etcd):
    endpoint, ca = tls_etcd
    store = EtcdStore([endpoint], ca_cert=ca, timeout=2.0)
    try:
        wait_until(lambda: store.revision() > 0)
        stream = store.watch("/tls/", store.revision() + 1)
        revision = store.put("/tls/k", b"v")
        assert store.get("/tls/k").value == b"v"
        assert stream.next(timeout=5).revision == revision
        stream.cancel()
    finally:
        store.close()
    plain = EtcdStore([endpoint], timeout=2.0)
    try:
        with pytest.raises(Unavailable):
            plain.get("/tls/k")
    finally:
        plain.close()
