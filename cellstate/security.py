"""etcd authentication for cells: one writer and one reader role per cell, one user and one
credential file per component.

For each cell ``C`` (prefix ``{root}/cells/C/``):

    role  C-writer   readwrite on [prefix, prefix_end)   users C-scheduler, C-agent
    role  C-reader   read      on [prefix, prefix_end)   users C-monitor, C-recorder

Both roles may also read the single key ``"\\0"`` (never written): ``EtcdStore``
reads it to learn the store revision and the compact revision. The ``root`` user
(role ``root``) administers. Passwords are random. ``secure_cells`` writes them to a
credentials directory (mode 0700), one file per user (mode 0600) holding that user's
password only: ``admin.json`` for root, ``{cell}-{component}.json`` for the others,
beside ``ca.pem`` (a copy of the CA certificate, so no component needs the PKI
directory, which also holds the CA key and the token-signing key). It is idempotent:
run again with more cells (or after a restart with the same data directory) it reuses
the files and adds what is missing. Auth changes go through etcd's gRPC Auth service
directly (the etcd3 client has no user/role API).

With ``client_certs_from`` (an etcd with ``--client-cert-auth``) each user also gets a client
certificate with its name as CN beside its file, which names it by file name (relative paths in
a credential file are taken relative to its directory).

etcd's RBAC has version-dependent holes: ``cellstate.rbac_gaps``.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import grpc
import etcd3.etcdrpc as rpc
from etcd3.etcdrpc import auth_pb2

from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.store import channel_credentials, parse_endpoint
from cellstate.etcd.wire import prefix_end_bytes
from cellstate.keys import DEFAULT_ROOT, CellKeys
from cellstate.private_files import private_directory, write_private, write_public

ROOT_USER = "root"
ROOT_ROLE = "root"
# Component user -> role kind of its cell.
CELL_USERS = {"scheduler": "writer", "agent": "writer", "monitor": "reader", "recorder": "reader"}
ROLE_PERMISSIONS = {"writer": auth_pb2.Permission.READWRITE, "reader": auth_pb2.Permission.READ}
REVISION_PROBE_KEY = b"\0"
CREDENTIALS_DIR = "credentials"     # under the data dir of `omega cell up --secure`
ADMIN_FILE = "admin.json"           # root's credential file in it
CA_FILE = "ca.pem"                  # the CA certificate clients trust, copied beside the files
LEGACY_CREDENTIALS_FILE = "credentials.json"  # the old every-user file; migrated and removed
DEFAULT_TOKEN_TTL = "24h"
_EXISTS = "already exists"


class SecurityError(RuntimeError):
    """Auth could not be set up, or credentials could not be read or written."""


@dataclass(frozen=True)
class UserCredential:
    name: str
    password: str
    role: str
    cell: str | None = None
    cert: str | None = None  # the user's client certificate (CN = name) and key, with --client-cert-auth
    key: str | None = None


@dataclass(frozen=True)
class Credentials:
    """Who may log in to an etcd, as kept in the credentials file."""

    endpoints: tuple[str, ...]
    ca_cert: str | None
    key_root: str
    users: dict[str, UserCredential] = field(default_factory=dict)

    def user(self, name: str) -> UserCredential:
        """The credential of ``name``; SecurityError listing the known users otherwise."""
        try:
            return self.users[name]
        except KeyError:
            raise SecurityError(f"no user {name!r} in the credentials; known: {', '.join(sorted(self.users))}") \
                from None

    def pick(self, name: str | None, source: str = "the credentials") -> UserCredential:
        """The credential of ``name``, or with ``name`` None the only one there is; SecurityError
        naming who ``source`` is for otherwise (a component's file holds its own user only)."""
        if name is None:
            if len(self.users) == 1:
                return next(iter(self.users.values()))
            raise SecurityError(f"{source} holds {len(self.users)} users ({', '.join(sorted(self.users))}); "
                                f"choose one with --as")
        if name in self.users:
            return self.users[name]
        if len(self.users) == 1:
            only = next(iter(self.users.values()))
            raise SecurityError(f"{source} is for user {only.name!r} ({describe(only)}), not {name!r}")
        raise SecurityError(f"no user {name!r} in {source}; known: {', '.join(sorted(self.users))}")

    def store_kwargs(self, name: str) -> dict:
        """EtcdStore keyword arguments (user, password, ca_cert, and cert/key when the user has a
        client certificate) to connect as ``name``."""
        cred = self.user(name)
        kwargs = {"user": cred.name, "password": cred.password, "ca_cert": self.ca_cert}
        if cred.cert is not None:
            kwargs.update(cert=cred.cert, key=cred.key)
        return kwargs


def cell_user(cell: str, component: str) -> str:
    """The user name of ``component`` (scheduler, agent, monitor, recorder) in ``cell``."""
    if component not in CELL_USERS:
        raise SecurityError(f"unknown component {component!r}; expected one of {', '.join(CELL_USERS)}")
    return f"{cell}-{component}"


def cell_role(cell: str, kind: str) -> str:
    return f"{cell}-{kind}"


def describe(cred: UserCredential) -> str:
    """``"admin"`` for root, else ``"role a-reader of cell a"``."""
    return "admin" if cred.cell is None else f"role {cred.role} of cell {cred.cell}"


def credential_file(directory: str | os.PathLike, user: str) -> Path:
    """The file of ``user`` in a credentials directory: ``admin.json`` for root, ``{user}.json`` else."""
    return Path(directory) / (ADMIN_FILE if user == ROOT_USER else f"{user}.json")


def new_password() -> str:
    return secrets.token_urlsafe(24)


# -- credentials file ---------------------------------------------------------------------------------

def save_credentials(path: str | os.PathLike, creds: Credentials) -> None:
    """Write ``creds`` as JSON, mode 0600, replacing the file atomically (``_user_record``)."""
    target = Path(path)
    data = {"endpoints": list(creds.endpoints), "ca_cert": creds.ca_cert, "key_root": creds.key_root,
            "users": {name: _user_record(u, target.parent) for name, u in sorted(creds.users.items())}}
    try:
        write_private(target, json.dumps(data, indent=2).encode())
    except OSError as exc:
        raise SecurityError(f"cannot write credentials file {str(target)!r}: {exc.strerror}") from None


def _user_record(cred: UserCredential, directory: Path) -> dict:
    """A user's entry in a credential file: cert/key only when set, by file name when they lie
    beside the file (so the files can be copied to another host together)."""
    record = asdict(cred)
    for field_name in ("cert", "key"):
        value = record.pop(field_name)
        if value is not None:
            record[field_name] = Path(value).name if Path(value).parent == directory else value
    return record


def load_credentials(path: str | os.PathLike) -> Credentials:
    """The credentials in the file ``path``, or in every ``*.json`` file of the directory ``path``
    (an administrator's view); SecurityError naming the file and the problem."""
    if Path(path).is_dir():
        files = sorted(Path(path).glob("*.json"))
        if not files:
            raise SecurityError(f"credentials directory {str(path)!r} holds no credential file")
        loaded = [load_credentials(f) for f in files]
        users = {name: u for creds in loaded for name, u in creds.users.items()}
        first = loaded[0]
        return Credentials(first.endpoints, first.ca_cert, first.key_root, users)
    try:
        data = json.loads(Path(path).read_text())
        users = {name: UserCredential(**{**u, **_beside(path, u, ("cert", "key"))})
                 for name, u in data["users"].items()}
        ca_cert = _beside(path, data, ("ca_cert",))["ca_cert"]
        return Credentials(tuple(data["endpoints"]), ca_cert, data["key_root"], users)
    except OSError as exc:
        raise SecurityError(f"cannot read credentials file {str(path)!r}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecurityError(f"credentials file {str(path)!r} is malformed: {exc!r}") from None


def _beside(path: str | os.PathLike, data: dict, fields: tuple[str, ...]) -> dict:
    """``data``'s file-path ``fields``, a relative one taken as relative to the directory of the
    credential file ``path`` (client certificates are written so: the files travel together)."""
    return {f: (str(Path(path).parent / data[f]) if data.get(f) and not os.path.isabs(data[f]) else data.get(f))
            for f in fields}


# -- the Auth service ----------------------------------------------------------------------------------

class AuthAdmin:
    """Administers etcd auth over one gRPC channel to the first endpoint (TLS when ``ca_cert``,
    presenting the client certificate ``cert``/``key`` when given: ``channel_credentials``)."""

    def __init__(self, endpoints: Sequence[str], ca_cert: str | None = None, timeout: float = 5.0,
                 cert: str | None = None, key: str | None = None):
        if isinstance(endpoints, str) or not endpoints:
            raise SecurityError(f"endpoints must be a non-empty list of host:port, got {endpoints!r}")
        try:
            host, port = parse_endpoint(endpoints[0])
            creds = channel_credentials(endpoints, ca_cert, cert, key)
        except ValueError as exc:
            raise SecurityError(str(exc)) from None
        target = f"{host}:{port}"
        self._channel = grpc.insecure_channel(target) if creds is None else grpc.secure_channel(target, creds)
        self._stub = rpc.AuthStub(self._channel)
        self._timeout = timeout
        self._metadata: tuple | None = None
        self.target = target

    def _call(self, method: str, request, what: str, tolerate: str | None = None):
        try:
            return getattr(self._stub, method)(request, self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            if tolerate and tolerate in (exc.details() or ""):
                return None
            raise SecurityError(f"etcd at {self.target} refused {what}: {exc.code().name}: {exc.details()}") \
                from None

    def login(self, user: str, password: str) -> bool:
        """Authenticate; True when auth is enabled (later calls carry the token), False when it is off."""
        try:
            resp = self._stub.Authenticate(rpc.AuthenticateRequest(name=user, password=password), self._timeout)
        except grpc.RpcError as exc:
            if "authentication is not enabled" in (exc.details() or ""):
                return False
            raise SecurityError(f"etcd at {self.target} refused login of {user!r}: {exc.details()}") from None
        self._metadata = (("token", resp.token),)
        return True

    def add_role(self, role: str) -> None:
        self._call("RoleAdd", rpc.AuthRoleAddRequest(name=role), f"adding role {role!r}", tolerate=_EXISTS)

    def grant(self, role: str, key: bytes, range_end: bytes, perm: int) -> None:
        """Give ``role`` ``perm`` on [key, range_end) (range_end b"": the single key)."""
        permission = auth_pb2.Permission(permType=perm, key=key, range_end=range_end)
        self._call("RoleGrantPermission", rpc.AuthRoleGrantPermissionRequest(name=role, perm=permission),
                   f"granting {auth_pb2.Permission.Type.Name(perm)} on {key!r} to {role!r}")

    def set_user(self, user: str, password: str, role: str) -> None:
        """Create ``user`` with ``password`` (or reset the password of an existing one) and grant ``role``."""
        added = self._call("UserAdd", rpc.AuthUserAddRequest(name=user, password=password),
                           f"adding user {user!r}", tolerate=_EXISTS)
        if added is None:
            self._call("UserChangePassword", rpc.AuthUserChangePasswordRequest(name=user, password=password),
                       f"resetting the password of {user!r}")
        self._call("UserGrantRole", rpc.AuthUserGrantRoleRequest(user=user, role=role),
                   f"granting role {role!r} to {user!r}")

    def enable(self) -> None:
        self._call("AuthEnable", rpc.AuthEnableRequest(), "enabling authentication")

    def revision(self) -> int:
        """The store's current revision."""
        return self._range_at(0).header.revision

    def compact_revision(self) -> int:
        """The oldest revision still readable (1: never compacted), found by bisecting reads at
        past revisions (etcd 3.4/3.5 report it nowhere else without a watch)."""
        low, high = 1, self.revision()
        while low < high:
            mid = (low + high) // 2
            if self._range_at(mid) is None:
                low = mid + 1
            else:
                high = mid
        return low

    def _range_at(self, revision: int):
        """A read of the probe key at ``revision`` (0: now); None when that revision is compacted."""
        try:
            return rpc.KVStub(self._channel).Range(rpc.RangeRequest(key=REVISION_PROBE_KEY, revision=revision),
                                                   self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            if "compacted" in (exc.details() or ""):
                return None
            raise SecurityError(f"etcd at {self.target} refused a read at revision {revision}: "
                                f"{exc.details()}") from None

    def alarms(self) -> list[str]:
        """Active alarms as "NOSPACE on member 8e9e05c52164694d"."""
        try:
            resp = rpc.MaintenanceStub(self._channel).Alarm(rpc.AlarmRequest(action=rpc.AlarmRequest.GET),
                                                            self._timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            raise SecurityError(f"etcd at {self.target} refused the alarm list: {exc.details()}") from None
        return [f"{rpc.AlarmType.Name(a.alarm)} on member {a.memberID:x}" for a in resp.alarms]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AuthAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def add_cell(admin: AuthAdmin, cell: str, key_root: str = DEFAULT_ROOT,
             known: dict[str, UserCredential] | None = None) -> dict[str, UserCredential]:
    """Create the roles and users of ``cell``; known users keep their passwords. Returns the cell's users."""
    if not cell or "/" in cell:
        raise SecurityError(f'cell name must be non-empty and without "/", got {cell!r}')
    known = known or {}
    prefix = CellKeys(cell=cell, root=key_root).prefix.encode()
    for kind, perm in ROLE_PERMISSIONS.items():
        role = cell_role(cell, kind)
        admin.add_role(role)
        admin.grant(role, prefix, prefix_end_bytes(prefix), perm)
        admin.grant(role, REVISION_PROBE_KEY, b"", auth_pb2.Permission.READ)
    users = {}
    for component, kind in CELL_USERS.items():
        name = cell_user(cell, component)
        password = known[name].password if name in known else new_password()
        admin.set_user(name, password, cell_role(cell, kind))
        users[name] = UserCredential(name, password, cell_role(cell, kind), cell)
    return users


def secure_cells(endpoints: Sequence[str], cells: Sequence[str], credentials_dir: str | os.PathLike,
                 key_root: str = DEFAULT_ROOT, ca_cert: str | None = None,
                 legacy_file: str | os.PathLike | None = None,
                 client_certs_from: str | os.PathLike | None = None) -> Credentials:
    """Turn on etcd auth with the root user and the roles and users of ``cells``; write one
    credential file per user into ``credentials_dir`` (see the module docstring).

    With ``client_certs_from`` (the PKI directory holding the CA key; for an etcd with
    ``--client-cert-auth``) every user also gets a client certificate with its name as CN,
    ``{stem}.pem``/``{stem}.key`` beside its ``{stem}.json`` (which names them), issued once and
    reused while valid; root's is presented to set auth up.

    The files already there (or an old every-user ``legacy_file``, which is then removed) supply
    the root password and the passwords of known users; auth already on is fine (root logs in
    and adds what is missing). Returns every user's credential (the administrator's view).
    """
    if not cells:
        raise SecurityError("secure_cells needs at least one cell")
    directory = _private_directory(credentials_dir)
    known: dict[str, UserCredential] = {}
    legacy = Path(legacy_file) if legacy_file is not None else None
    if legacy is not None and legacy.exists():
        known.update(load_credentials(legacy).users)
    if any(directory.glob("*.json")):
        known.update(load_credentials(directory).users)
    root_password = known[ROOT_USER].password if ROOT_USER in known else new_password()
    users = dict(known)
    tls = {}
    if client_certs_from is not None:
        tls = {name: client_cert(client_certs_from, directory, name)
               for name in [ROOT_USER] + [cell_user(c, k) for c in cells for k in CELL_USERS] + list(known)}
    root_cert, root_key = tls.get(ROOT_USER, (None, None))
    with AuthAdmin(endpoints, ca_cert, cert=root_cert, key=root_key) as admin:
        enabled = admin.login(ROOT_USER, root_password)
        if not enabled:
            admin.add_role(ROOT_ROLE)
            admin.set_user(ROOT_USER, root_password, ROOT_ROLE)
        users[ROOT_USER] = UserCredential(ROOT_USER, root_password, ROOT_ROLE)
        for cell in cells:
            users.update(add_cell(admin, cell, key_root, known))
        if not enabled:
            admin.enable()
    client_ca = _copy_ca(ca_cert, directory) if ca_cert is not None else None
    for name, (cert, key) in tls.items():
        users[name] = replace(users[name], cert=cert, key=key)
    for name, cred in users.items():
        save_credentials(credential_file(directory, name), Credentials(tuple(endpoints), client_ca, key_root,
                                                                       {name: cred}))
    if legacy is not None and legacy.exists():
        legacy.unlink()  # it held root's password beside every other one
    return Credentials(tuple(endpoints), client_ca, key_root, users)


def client_cert(pki_dir: str | os.PathLike, directory: str | os.PathLike, user: str) -> tuple[str, str]:
    """(certificate, key) paths of ``user``'s client certificate (CN ``user``) in the credentials
    ``directory``, named after its credential file; issued by the CA in ``pki_dir`` unless a
    valid one of that CA is there. SecurityError when it cannot be issued."""
    from cellstate.pki import PkiError, client_cert_valid, issue_cert

    stem = credential_file(directory, user).stem
    cert, key = Path(directory) / f"{stem}.pem", Path(directory) / f"{stem}.key"
    if client_cert_valid(pki_dir, cert, key, user):
        return str(cert), str(key)
    try:
        files = issue_cert(pki_dir, stem, hosts=(), server=False, client=True, out=directory, common_name=user)
    except PkiError as exc:
        raise SecurityError(f"cannot issue the client certificate of {user!r}: {exc}") from None
    return files.cert, files.key


def _private_directory(path: str | os.PathLike) -> Path:
    try:
        return private_directory(path)
    except OSError as exc:
        raise SecurityError(f"cannot prepare credentials directory {str(path)!r}: {exc.strerror}") from None


def _copy_ca(ca_cert: str, directory: Path) -> str:
    """Copy the CA certificate (public) into ``directory`` as ``ca.pem`` (0644); its path."""
    target = directory / CA_FILE
    try:
        write_public(target, Path(ca_cert).read_bytes())
    except OSError as exc:
        raise SecurityError(f"cannot copy CA certificate {ca_cert!r} to {str(target)!r}: {exc.strerror}") from None
    return str(target)


def secure_options(pki_dir: str | os.PathLike, token_ttl: str = DEFAULT_TOKEN_TTL, hosts=(),
                   **options) -> EtcdOptions:
    """EtcdOptions with TLS from the local PKI in ``pki_dir`` (the server certificate naming
    ``hosts`` besides loopback) and ES256 JWT auth tokens.

    JWT tokens (unlike etcd's default "simple" tokens) stay valid on every member and
    across restarts; they expire after ``token_ttl`` (an etcd duration like "24h"). Every member
    must sign with the same key: on a host without the CA key (a member host given a copy of the
    PKI) missing JWT keys are a PkiError, not made afresh.
    """
    from cellstate.pki import CA_NAME, JWT_NAME, PkiError, ensure_jwt_keys, ensure_local_pki

    pki = ensure_local_pki(pki_dir, hosts=hosts)
    path = Path(pki_dir)
    if not (path / f"{CA_NAME}.key").exists() and not (path / f"{JWT_NAME}.key").exists():
        raise PkiError(f"{path / (JWT_NAME + '.key')} is missing: copy jwt.key and jwt.pub from the host holding "
                       "the CA, so every member signs auth tokens with the same key")
    private, public = ensure_jwt_keys(pki_dir)
    extra = list(options.pop("extra_args", []))
    extra += ["--auth-token", f"jwt,pub-key={public},priv-key={private},sign-method=ES256,ttl={token_ttl}"]
    return EtcdOptions(tls=pki.server, extra_args=extra, **options)
