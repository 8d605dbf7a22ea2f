"""Flags and store construction shared by the commands that talk to a cell."""

from __future__ import annotations

import os

from cellstate.etcd_store import EtcdStore, parse_endpoint
from cellstate.keys import DEFAULT_ROOT, CellKeys

DEFAULT_ENDPOINTS = "127.0.0.1:2379"
# Safe for any etcd (its default --max-txn-ops); raise it for an etcd started with a higher limit.
DEFAULT_MAX_TXN_OPS = 128


def add_store_args(parser) -> None:
    """--endpoints, --cell, --root and --max-txn-ops."""
    parser.add_argument("--endpoints", default=os.environ.get("OMEGA_ENDPOINTS", DEFAULT_ENDPOINTS),
                        help="comma-separated etcd host:port list (default: $OMEGA_ENDPOINTS or "
                             f"{DEFAULT_ENDPOINTS})")
    parser.add_argument("--cell", default="default", help="cell name (default: default)")
    parser.add_argument("--root", default=DEFAULT_ROOT, help=f"key root (default: {DEFAULT_ROOT})")
    parser.add_argument("--max-txn-ops", type=int, default=DEFAULT_MAX_TXN_OPS,
                        help=f"operations per txn the etcd accepts (default {DEFAULT_MAX_TXN_OPS})")


def endpoints_of(text: str) -> list[str]:
    """The endpoints of a comma-separated list; UsageError when one is not host:port."""
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


def open_store(args) -> EtcdStore:
    """An EtcdStore on ``args.endpoints``."""
    from tools.cli import UsageError

    if args.max_txn_ops < 1:
        raise UsageError(f"--max-txn-ops must be >= 1, got {args.max_txn_ops}")
    return EtcdStore(endpoints_of(args.endpoints), max_txn_ops=args.max_txn_ops)


def cell_keys(args) -> CellKeys:
    """The keys of ``args.cell`` under ``args.root``; UsageError for a name with "/"."""
    from tools.cli import UsageError

    if not args.cell or "/" in args.cell:
        raise UsageError(f'--cell must be a non-empty name without "/", got {args.cell!r}')
    return CellKeys(cell=args.cell, root=args.root)
