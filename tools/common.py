"""Flags and store construction shared by the commands that talk to a cell."""

from __future__ import annotations

import os

from cellstate.keys import DEFAULT_ROOT, CellKeys

DEFAULT_ENDPOINTS = "127.0.0.1:2379"
# Safe for any etcd (its default --max-txn-ops); raise it for an etcd started with a higher limit.
DEFAULT_MAX_TXN_OPS = 128


def add_store_args(parser) -> None:
    """--endpoints, --cell, --root, --max-txn-ops and the TLS/auth flags (see add_auth_args)."""
    parser.add_argument("--endpoints", default=os.environ.get("OMEGA_ENDPOINTS", DEFAULT_ENDPOINTS),
                        help="comma-separated etcd host:port list (default: $OMEGA_ENDPOINTS or "
                             f"{DEFAULT_ENDPOINTS})")
    parser.add_argument("--cell", default="default", help="cell name (default: default)")
    parser.add_argument("--root", default=DEFAULT_ROOT, help=f"key root (default: {DEFAULT_ROOT})")
    parser.add_argument("--max-txn-ops", type=int, default=DEFAULT_MAX_TXN_OPS,
                        help=f"operations per txn the etcd accepts (default {DEFAULT_MAX_TXN_OPS})")
    add_auth_args(parser)


def add_auth_args(parser) -> None:
    """--ca-cert, --user/--password/--password-file, --credentials/--as (all optional; env defaults)."""
    env = os.environ.get
    group = parser.add_argument_group("etcd TLS and authentication")
    group.add_argument("--ca-cert", default=env("OMEGA_CA_CERT"), metavar="PEM",
                       help="connect over TLS trusting this CA (default: $OMEGA_CA_CERT, or the credentials file's)")
    group.add_argument("--user", default=env("OMEGA_USER"), help="etcd user (default: $OMEGA_USER)")
    group.add_argument("--password", default=env("OMEGA_PASSWORD"),
                       help="etcd password (default: $OMEGA_PASSWORD; prefer --password-file)")
    group.add_argument("--password-file", metavar="FILE", help="read the etcd password from FILE")
    group.add_argument("--credentials", default=env("OMEGA_CREDENTIALS"), metavar="FILE",
                       help="credentials file written by `omega cell up --secure` (default: $OMEGA_CREDENTIALS)")
    group.add_argument("--as", dest="as_user", default=env("OMEGA_AS"), metavar="USER",
                       help="with --credentials: log in as USER, e.g. default-scheduler (default: $OMEGA_AS)")


def endpoints_of(text: str) -> list[str]:
    """The endpoints of a comma-separated list; UsageError when one is not host:port."""
    from cellstate.etcd_store import parse_endpoint
    from tools.cli import UsageError

    endpoints = [e.strip() for e in text.split(",") if e.strip()]
    if not endpoints:
        raise UsageError("--endpoints: no endpoint given")
    for endpoint in endpoints:
        try:
            parse_endpoint(endpoint)
        except ValueError as exc:
            raise UsageError(f"--endpoints: {exc}") from None
    return endpoints


def store_auth(args) -> dict:
    """EtcdStore keyword arguments (user, password, ca_cert) from the auth flags; {} when none is set."""
    from tools.cli import UsageError

    flag = lambda name: getattr(args, name, None)  # noqa: E731 - namespaces built without add_auth_args
    user, password, ca_cert = flag("as_user") or flag("user"), flag("password"), flag("ca_cert")
    if flag("credentials"):
        from cellstate.security import SecurityError, load_credentials

        if not user:
            raise UsageError("--credentials needs --as USER (e.g. default-scheduler)")
        try:
            auth = load_credentials(flag("credentials")).store_kwargs(user)
        except SecurityError as exc:
            raise UsageError(f"--credentials: {exc}") from None
        return {**auth, "ca_cert": ca_cert or auth["ca_cert"]}
    if flag("password_file"):
        try:
            with open(flag("password_file")) as f:
                password = f.read().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(f"--password-file {flag('password_file')!r}: {exc.strerror}") from None
    if (user is None) != (password is None):
        raise UsageError("--user needs --password or --password-file (and a password needs --user)")
    return {"user": user, "password": password, "ca_cert": ca_cert} if (user or ca_cert) else {}


def open_store(args):
    """An EtcdStore on ``args.endpoints``, with TLS and authentication when the flags ask for them
    (imported here: building the parser loads no gRPC)."""
    from cellstate.etcd_store import EtcdStore
    from tools.cli import UsageError

    if args.max_txn_ops < 1:
        raise UsageError(f"--max-txn-ops must be >= 1, got {args.max_txn_ops}")
    auth = store_auth(args)
    try:
        return EtcdStore(endpoints_of(args.endpoints), max_txn_ops=args.max_txn_ops, **auth)
    except ValueError as exc:  # an unreadable CA certificate
        raise UsageError(str(exc)) from None


def cell_keys(args) -> CellKeys:
    """The keys of ``args.cell`` under ``args.root``; UsageError for a name with "/"."""
    from tools.cli import UsageError

    if not args.cell or "/" in args.cell:
        raise UsageError(f'--cell must be a non-empty name without "/", got {args.cell!r}')
    return CellKeys(cell=args.cell, root=args.root)
