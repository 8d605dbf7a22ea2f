"""``omega cell up [--secure]``: run the embedded etcd for cells in the foreground until Ctrl-C.

With ``--secure`` clients must use TLS (a local CA and server certificate in
``DATA_DIR/pki``) and log in: ``root`` plus, per ``--cell``, the users
``{cell}-scheduler``/``{cell}-agent`` (read-write on the cell) and
``{cell}-monitor``/``{cell}-recorder`` (read-only), whose random passwords are in
``DATA_DIR/credentials.json`` (mode 0600). Other commands connect with
``--credentials DATA_DIR/credentials.json --as default-scheduler``.

Registers ``up`` under the ``cell`` command of ``tools.cmd_cell`` (listed after it
in ``COMMAND_MODULES``), or creates ``cell`` when that module is absent.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from cellstate.etcd_server import EtcdCluster, EtcdError, EtcdOptions, RestartPolicy
from cellstate.keys import DEFAULT_ROOT
from tools.cmd_etcd import add_server_flags, describe_members, serve_until_stopped, server_options


def _cell_actions(sub):
    """The sub-command action of the ``cell`` parser (made here if no module registered it)."""
    cell = sub.choices.get("cell")
    if cell is None:
        cell = sub.add_parser("cell", help="cell setup")
        return cell.add_subparsers(dest="cell_command", required=True, metavar="ACTION")
    return next(a for a in cell._actions if isinstance(a, argparse._SubParsersAction))


def register(sub) -> None:
    up = _cell_actions(sub).add_parser("up", help="run an etcd for cells (TLS + auth with --secure) until Ctrl-C")
    up.add_argument("--secure", action="store_true", help="TLS for clients and peers, etcd auth with cell roles")
    up.add_argument("--data-dir", default=None,
                    help="keep etcd data (and the member ports), PKI and credentials here; starting again on "
                         "it restarts the same cluster (default: a temp dir removed on exit)")
    up.add_argument("--cell", action="append", dest="cells", metavar="NAME",
                    help="a cell to create users for with --secure (repeat; default: default)")
    up.add_argument("--root", default=DEFAULT_ROOT, help=f"key root of the cells (default: {DEFAULT_ROOT})")
    up.add_argument("--token-ttl", default="24h", help="lifetime of auth tokens with --secure (default 24h)")
    add_server_flags(up)
    up.set_defaults(func=run_up)


def _options(args, data_dir: Path) -> EtcdOptions:
    limits = server_options(args)
    if not args.secure:
        return EtcdOptions(**limits)
    from cellstate.security import secure_options

    return secure_options(data_dir / "pki", token_ttl=args.token_ttl, **limits)


def _start(args, data_dir: Path):
    """(running cluster, credentials path or None); UsageError when etcd or auth setup fails."""
    from cellstate.pki import PkiError
    from cellstate.security import CREDENTIALS_FILE, SecurityError, secure_cells
    from tools.cli import UsageError

    if args.members < 1:
        raise UsageError(f"--members must be >= 1, got {args.members}")
    cells = args.cells or ["default"]
    try:
        cluster = EtcdCluster(size=args.members, options=_options(args, data_dir), data_dir=str(data_dir),
                              client_port=args.port)
        cluster.start()
    except (EtcdError, PkiError) as exc:
        raise UsageError(str(exc)) from None
    if not args.secure:
        return cluster, None
    try:
        creds_path = data_dir / CREDENTIALS_FILE
        secure_cells(cluster.endpoints, cells, creds_path, args.root, cluster.ca_cert)
    except SecurityError as exc:
        cluster.stop()
        raise UsageError(str(exc)) from None
    return cluster, creds_path


def _announce(cluster: EtcdCluster, creds_path: Path | None) -> None:
    endpoints = ",".join(cluster.endpoints)
    print(f"etcd up ({'TLS + auth' if creds_path else 'plain'}); endpoints: {endpoints}", flush=True)
    print(f"  export OMEGA_ENDPOINTS={endpoints}", flush=True)
    if creds_path is not None:
        print(f"  CA certificate: {cluster.ca_cert}", flush=True)
        print(f"  credentials (mode 0600): {creds_path}", flush=True)
        print(f"  export OMEGA_CREDENTIALS={creds_path}  # then: --as <cell>-scheduler|agent|monitor|recorder",
              flush=True)
    describe_members(cluster)


def run_up(args) -> int:
    temporary = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="omega-cell-")) if temporary else Path(args.data_dir)
    if args.secure:  # keys and credentials inside; etcd itself makes its member dirs 0700
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
    try:
        cluster, creds_path = _start(args, data_dir)
        _announce(cluster, creds_path)
        return serve_until_stopped(cluster, RestartPolicy(max_restarts=args.max_restarts))
    finally:
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)
