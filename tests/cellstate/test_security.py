"""Cell roles on a real etcd with TLS and auth: who may read and write which cell."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.store import EtcdStore
from cellstate.keys import CellKeys
from cellstate.security import (
    ADMIN_FILE, CREDENTIALS_DIR, SecurityError, cell_user, credential_file, load_credentials, secure_cells,
    secure_options,
)
from cellstate.store import PermissionDenied, Put, StoreError, Unavailable, mod_revision_is

CELL_A, CELL_B = "a", "ab"  # "ab" shares the text prefix of "a": the trailing "/" must keep them apart


@pytest.fixture(scope="module")
def secure_etcd(tmp_path_factory):
    """(cluster, credentials) of a private one-member etcd with TLS and auth for cells a and ab."""
    root = tmp_path_factory.mktemp("secure-etcd")
    cluster = EtcdCluster(size=1, options=secure_options(root / "pki", unsafe_no_fsync=True),
                          data_dir=str(root / "data"))
    cluster.start()
    try:
        creds = secure_cells(cluster.endpoints, [CELL_A, CELL_B], root / CREDENTIALS_DIR, ca_cert=cluster.ca_cert)
        yield cluster, creds
    finally:
        cluster.stop()


@pytest.fixture
def login(secure_etcd):
    """login(user) -> an EtcdStore of that user, closed after the test."""
    cluster, creds = secure_etcd
    stores = []

    def connect(user: str) -> EtcdStore:
        stores.append(EtcdStore(cluster.endpoints, **creds.store_kwargs(user)))
        return stores[-1]

    yield connect
    for store in stores:
        store.close()


def key_in(cell: str, name: str) -> str:
    return CellKeys(cell=cell).job(name)


@pytest.fixture(scope="module", autouse=True)
def seeded(secure_etcd):
    """One job key in each cell, written by root."""
    cluster, creds = secure_etcd
    with EtcdStore(cluster.endpoints, **creds.store_kwargs("root")) as store:
        for cell in (CELL_A, CELL_B):
            store.put(key_in(cell, "seed"), b"seed")


ACCESS = [
    # (user, action, cell, allowed)
    ("a-monitor", "read", CELL_A, True),
    ("a-monitor", "write", CELL_A, False),
    ("a-recorder", "read", CELL_A, True),
    ("a-recorder", "write", CELL_A, False),
    ("a-scheduler", "read", CELL_A, True),
    ("a-scheduler", "write", CELL_A, True),
    ("a-agent", "write", CELL_A, True),
    ("a-scheduler", "read", CELL_B, False),
    ("a-scheduler", "write", CELL_B, False),
    ("a-monitor", "read", CELL_B, False),
    ("ab-scheduler", "write", CELL_A, False),
    ("ab-scheduler", "write", CELL_B, True),
]


def attempt(store: EtcdStore, action: str, cell: str) -> None:
    if action == "read":
        result = store.range(CellKeys(cell=cell).prefix)
        assert [kv.key for kv in result.kvs if kv.key.endswith("/seed")] == [key_in(cell, "seed")]
    else:
        key = key_in(cell, "written")
        revision = store.put(key, b"w")
        assert store.get(key).mod_revision == revision


@pytest.mark.parametrize("user, action, cell, allowed", ACCESS,
                         ids=[f"{u}-{a}-{c}-{'ok' if ok else 'denied'}" for u, a, c, ok in ACCESS])
def test_cell_roles_allow_and_deny(login, user, action, cell, allowed):
    store = login(user)
    if allowed:
        attempt(store, action, cell)
    else:
        with pytest.raises(PermissionDenied, match="permission denied"):
            attempt(store, action, cell)


def test_txn_touching_another_cell_is_denied_as_a_whole(login):
    store = login("a-scheduler")
    own, other = key_in(CELL_A, "txn"), key_in(CELL_B, "txn")
    with pytest.raises(PermissionDenied):
        store.txn([mod_revision_is(own, 0)], [Put(own, b"1"), Put(other, b"1")])
    assert store.get(own) is None  # nothing of the refused txn was applied
    assert store.txn([mod_revision_is(own, 0)], [Put(own, b"1")]).succeeded


def test_reader_watches_its_cell_but_not_another(login):
    store = login("a-monitor")
    writer = login("a-scheduler")
    start = store.revision() + 1  # the revision probe key is readable by every cell role
    own = store.watch(CellKeys(cell=CELL_A).prefix, start)
    other = store.watch(CellKeys(cell=CELL_B).prefix, start)
    try:
        revision = writer.put(key_in(CELL_A, "watched"), b"x")
        assert own.next(timeout=5).revision == revision
        with pytest.raises(PermissionDenied):
            other.next(timeout=5)
    finally:
        own.cancel()
        other.cancel()


def test_writer_keeps_leased_stats_in_its_cell(login):
    store = login("a-scheduler")
    lease = store.grant_lease(10)
    store.put(CellKeys(cell=CELL_A).stats("s1"), b"stats", lease=lease)
    store.refresh_lease(lease)
    store.revoke_lease(lease)
    assert store.get(CellKeys(cell=CELL_A).stats("s1")) is None


@pytest.mark.parametrize("kwargs, error, message", [
    ({"user": "a-monitor", "password": "wrong"}, PermissionDenied, "authentication failed"),
    ({}, PermissionDenied, "user name is empty"),
], ids=["wrong-password", "anonymous"])
def test_bad_logins_are_permission_denied(secure_etcd, kwargs, error, message):
    cluster, _ = secure_etcd
    with pytest.raises(error, match=message):
        with EtcdStore(cluster.endpoints, ca_cert=cluster.ca_cert, timeout=3.0, **kwargs) as store:
            store.get(key_in(CELL_A, "seed"))


def test_plain_text_connection_is_refused(secure_etcd):
    cluster, creds = secure_etcd
    password = creds.user("a-monitor").password
    with pytest.raises(Unavailable):
        with EtcdStore(cluster.endpoints, user="a-monitor", password=password, timeout=2.0) as store:
            store.get(key_in(CELL_A, "seed"))


def test_untrusted_ca_is_refused(secure_etcd, tmp_path):
    from cellstate.pki import make_ca

    cluster, creds = secure_etcd
    stranger_ca = make_ca(tmp_path / "other-ca")
    with pytest.raises(StoreError):
        with EtcdStore(cluster.endpoints, user="a-monitor", password=creds.user("a-monitor").password,
                       ca_cert=stranger_ca, timeout=2.0) as store:
            store.get(key_in(CELL_A, "seed"))


def creds_dir(secure_etcd) -> Path:
    """Where the fixture's secure_cells wrote the credential files (next to the data dir)."""
    cluster, _ = secure_etcd
    return cluster.data_root.parent / CREDENTIALS_DIR


def test_each_user_has_its_own_private_file_and_only_admin_holds_root(secure_etcd):
    cluster, creds = secure_etcd
    directory = creds_dir(secure_etcd)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    files = sorted(p.name for p in directory.glob("*.json"))
    users = [cell_user(c, k) for c in (CELL_A, CELL_B) for k in ("agent", "monitor", "recorder", "scheduler")]
    assert files == sorted([ADMIN_FILE] + [f"{u}.json" for u in users])
    root_password = creds.user("root").password
    for path in directory.glob("*.json"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        held = load_credentials(path).users
        assert len(held) == 1, path.name
        (name, cred), = held.items()
        assert path == credential_file(directory, name)
        assert (root_password in path.read_text()) == (path.name == ADMIN_FILE)
        assert cred.password == creds.user(name).password
    # components trust the CA copied beside the files, not the PKI directory (CA key, JWT key)
    assert load_credentials(directory / "a-monitor.json").ca_cert == str(directory / "ca.pem")
    assert not {p.name for p in directory.iterdir()} & {"jwt.key", "ca.key", "server.key"}


def test_token_signing_key_is_readable_by_etcd_alone(secure_etcd):
    cluster, _ = secure_etcd
    pki = Path(cluster.ca_cert).parent
    assert stat.S_IMODE(os.stat(pki).st_mode) == 0o700
    for key in ("jwt.key", "ca.key", "server.key"):
        assert stat.S_IMODE(os.stat(pki / key).st_mode) == 0o600
    assert pki != creds_dir(secure_etcd) and creds_dir(secure_etcd) not in pki.parents


@pytest.mark.parametrize("other", ["a-scheduler", "a-agent", "a-recorder", "ab-monitor", "root"])
def test_monitor_file_cannot_authenticate_as_anything_else(secure_etcd, other):
    cluster, _ = secure_etcd
    monitor = load_credentials(creds_dir(secure_etcd) / "a-monitor.json")
    with pytest.raises(SecurityError, match="is for user 'a-monitor'"):
        monitor.pick(other, "a-monitor.json")
    password = monitor.user("a-monitor").password
    with pytest.raises(PermissionDenied, match="authentication failed"):
        with EtcdStore(cluster.endpoints, user=other, password=password, ca_cert=monitor.ca_cert,
                       timeout=3.0) as store:
            store.get(key_in(CELL_A, "seed"))


def test_rerun_adds_cells_keeping_passwords(secure_etcd, tmp_path):
    cluster, creds = secure_etcd
    directory = tmp_path / CREDENTIALS_DIR
    directory.mkdir()
    for path in creds_dir(secure_etcd).glob("*.json"):
        (directory / path.name).write_text(path.read_text())
    again = secure_cells(cluster.endpoints, [CELL_A, "c"], directory, ca_cert=cluster.ca_cert)
    assert again.user("a-monitor").password == creds.user("a-monitor").password
    assert again.user("root").password == creds.user("root").password
    assert load_credentials(directory / "c-scheduler.json").user(cell_user("c", "scheduler")).role == "c-writer"
    assert stat.S_IMODE(os.stat(directory / "c-scheduler.json").st_mode) == 0o600
    with EtcdStore(cluster.endpoints, **again.store_kwargs("c-scheduler")) as store:
        store.put(key_in("c", "x"), b"1")
        with pytest.raises(PermissionDenied):
            store.put(key_in(CELL_A, "x"), b"1")


def test_old_every_user_file_is_migrated_and_removed(secure_etcd, tmp_path):
    from cellstate.security import Credentials, save_credentials

    cluster, creds = secure_etcd
    legacy = tmp_path / "credentials.json"
    save_credentials(legacy, Credentials(tuple(cluster.endpoints), cluster.ca_cert, "/omega", dict(creds.users)))
    again = secure_cells(cluster.endpoints, [CELL_A], tmp_path / CREDENTIALS_DIR, ca_cert=cluster.ca_cert,
                         legacy_file=legacy)
    assert not legacy.exists()
    assert again.user("root").password == creds.user("root").password
    admin = load_credentials(tmp_path / CREDENTIALS_DIR / ADMIN_FILE)
    assert admin.user("root").password == again.user("root").password


@pytest.mark.parametrize("call, message", [
    (lambda c: c.user("nobody"), "no user 'nobody'"),
    (lambda c: cell_user("a", "janitor"), "unknown component 'janitor'"),
], ids=["unknown-user", "unknown-component"])
def test_credential_lookups_name_what_is_wrong(secure_etcd, call, message):
    _, creds = secure_etcd
    with pytest.raises(SecurityError, match=message):
        call(creds)


@pytest.mark.parametrize("content, message", [
    ("{not json", "malformed"),
    ('{"endpoints": []}', "malformed"),
], ids=["not-json", "missing-users"])
def test_malformed_credentials_file(tmp_path, content, message):
    path = tmp_path / "creds.json"
    path.write_text(content)
    with pytest.raises(SecurityError, match=message):
        load_credentials(path)


@pytest.mark.slow
def test_three_member_cluster_with_peer_tls(tmp_path):
    options = secure_options(tmp_path / "pki", unsafe_no_fsync=True)
    with EtcdCluster(size=3, options=options) as cluster:
        command = cluster.members[0].command()
        assert "--peer-client-cert-auth" in command
        assert all(url.startswith("https://") for url in (cluster.members[1].spec.peer_url,
                                                          cluster.members[1].spec.client_url))
        with EtcdStore(cluster.endpoints[2:], ca_cert=cluster.ca_cert) as last, \
                EtcdStore(cluster.endpoints[:1], ca_cert=cluster.ca_cert) as first:
            revision = last.put("/peer-tls/k", b"v")
            assert first.get("/peer-tls/k").mod_revision == revision
