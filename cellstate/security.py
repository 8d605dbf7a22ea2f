"""etcd authentication for cells: one writer and one reader role per cell, users per component.

For each cell ``C`` (prefix ``{root}/cells/C/``):

    role  C-writer   readwrite on [prefix, prefix_end)   users C-scheduler, C-agent
    role  C-reader   read      on [prefix, prefix_end)   users C-monitor, C-recorder

Both roles may also read the single key ``"\\0"`` (never written): ``EtcdStore``
reads it to learn the store revision and the compact revision. The ``root`` user
(role ``root``) administers. Passwords are random and kept in a JSON credentials
file of mode 0600; ``secure_cells`` is idempotent: run again with more cells (or
after a restart with the same data directory) it reuses the file and adds what is
missing. Auth changes go through etcd's gRPC Auth service directly (the etcd3
client has no user/role API).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import grpc
import etcd3.etcdrpc as rpc
from etcd3.etcdrpc import auth_pb2

from cellstate.etcd_server import EtcdOptions
from cellstate.etcd_store import parse_endpoint
from cellstate.etcd_wire import prefix_end_bytes
from cellstate.keys import DEFAULT_ROOT, CellKeys

ROOT_USER = "root"
ROOT_ROLE = "root"
# Component user -> role kind of its cell.
CELL_USERS = {"scheduler": "writer", "agent": "writer", "monitor": "reader", "recorder": "reader"}
ROLE_PERMISSIONS = {"writer": auth_pb2.Permission.READWRITE, "reader": auth_pb2.Permission.READ}
REVISION_PROBE_KEY = b"\0"
CREDENTIALS_FILE = "credentials.json"
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

    def store_kwargs(self, name: str) -> dict:
        """EtcdStore keyword arguments (user, password, ca_cert) to connect as ``name``."""
        cred = self.user(name)
        return {"user": cred.name, "password": cred.password, "ca_cert": self.ca_cert}


def cell_user(cell: str, component: str) -> str:
    """The user name of ``component`` (scheduler, agent, monitor, recorder) in ``cell``."""
    if component not in CELL_USERS:
        raise SecurityError(f"unknown component {component!r}; expected one of {', '.join(CELL_USERS)}")
    return f"{cell}-{component}"


def cell_role(cell: str, kind: str) -> str:
    return f"{cell}-{kind}"


def new_password() -> str:
    return secrets.token_urlsafe(24)


# -- credentials file ---------------------------------------------------------------------------------

def save_credentials(path: str | os.PathLike, creds: Credentials) -> None:
    """Write ``creds`` as JSON, mode 0600, replacing the file atomically."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    data = {"endpoints": list(creds.endpoints), "ca_cert": creds.ca_cert, "key_root": creds.key_root,
            "users": {name: asdict(u) for name, u in sorted(creds.users.items())}}
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except OSError as exc:
        raise SecurityError(f"cannot write credentials file {str(target)!r}: {exc.strerror}") from None


def load_credentials(path: str | os.PathLike) -> Credentials:
    """The credentials in ``path``; SecurityError naming the file and the problem."""
    try:
        data = json.loads(Path(path).read_text())
        users = {name: UserCredential(**u) for name, u in data["users"].items()}
        return Credentials(tuple(data["endpoints"]), data["ca_cert"], data["key_root"], users)
    except OSError as exc:
        raise SecurityError(f"cannot read credentials file {str(path)!r}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SecurityError(f"credentials file {str(path)!r} is malformed: {exc!r}") from None


# -- the Auth service ----------------------------------------------------------------------------------

class AuthAdmin:
    """Administers etcd auth over one gRPC channel to the first endpoint (TLS when ``ca_cert``)."""

    def __init__(self, endpoints: Sequence[str], ca_cert: str | None = None, timeout: float = 5.0):
        if isinstance(endpoints, str) or not endpoints:
            raise SecurityError(f"endpoints must be a non-empty list of host:port, got {endpoints!r}")
        host, port = parse_endpoint(endpoints[0])
        target = f"{host}:{port}"
        if ca_cert is None:
            self._channel = grpc.insecure_channel(target)
        else:
            try:
                with open(ca_cert, "rb") as f:
                    self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(f.read()))
            except OSError as exc:
                raise SecurityError(f"cannot read CA certificate {ca_cert!r}: {exc.strerror}") from None
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


def secure_cells(endpoints: Sequence[str], cells: Sequence[str], credentials_path: str | os.PathLike,
                 key_root: str = DEFAULT_ROOT, ca_cert: str | None = None) -> Credentials:
    """Turn on etcd auth with the root user and the roles and users of ``cells``; save the credentials.

    An existing credentials file supplies the root password and the passwords of
    known users; auth already on is fine (root logs in and adds what is missing).
    """
    if not cells:
        raise SecurityError("secure_cells needs at least one cell")
    path = Path(credentials_path)
    known = load_credentials(path).users if path.exists() else {}
    root_password = known[ROOT_USER].password if ROOT_USER in known else new_password()
    users = dict(known)
    with AuthAdmin(endpoints, ca_cert) as admin:
        enabled = admin.login(ROOT_USER, root_password)
        if not enabled:
            admin.add_role(ROOT_ROLE)
            admin.set_user(ROOT_USER, root_password, ROOT_ROLE)
        users[ROOT_USER] = UserCredential(ROOT_USER, root_password, ROOT_ROLE)
        for cell in cells:
            users.update(add_cell(admin, cell, key_root, known))
        if not enabled:
            admin.enable()
    creds = Credentials(tuple(endpoints), ca_cert, key_root, users)
    save_credentials(path, creds)
    return creds


def secure_options(pki_dir: str | os.PathLike, token_ttl: str = DEFAULT_TOKEN_TTL, **options) -> EtcdOptions:
    """EtcdOptions with TLS from the local PKI in ``pki_dir`` and ES256 JWT auth tokens.

    JWT tokens (unlike etcd's default "simple" tokens) stay valid on every member and
    across restarts; they expire after ``token_ttl`` (an etcd duration like "24h").
    """
    from cellstate.pki import ensure_jwt_keys, ensure_local_pki

    pki = ensure_local_pki(pki_dir)
    private, public = ensure_jwt_keys(pki_dir)
    extra = list(options.pop("extra_args", []))
    extra += ["--auth-token", f"jwt,pub-key={public},priv-key={private},sign-method=ES256,ttl={token_ttl}"]
    return EtcdOptions(tls=pki.server, extra_args=extra, **options)
