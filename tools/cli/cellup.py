"""``omega cell up [--secure]``: run the embedded etcd for cells in the foreground until Ctrl-C.

It serves clients on 127.0.0.1:2379 like ``omega etcd up`` (``--port``, see tools/cli/etcd.py).
With ``--secure`` clients must use TLS (a local CA and server certificate in ``DATA_DIR/pki``,
which only etcd reads) and log in: per ``--cell`` the users ``{cell}-scheduler``/``{cell}-agent``
(read-write on the cell) and ``{cell}-monitor``/``{cell}-recorder`` (read-only), plus ``root``.
Each user's random password is in its own file, ``DATA_DIR/credentials/{user}.json`` (root's:
``admin.json``; mode 0600, beside the public ``ca.pem``), to hand to that component alone:
``omega check --cell a --credentials DATA_DIR/credentials/a-monitor.json``.

With ``--client-cert-auth`` clients must also present a certificate of that CA (mTLS): each
user gets one (CN = the user) beside its credential file, which names it. ``--listen``,
``--advertise`` and ``--name``/``--initial-cluster`` place the members as for ``omega etcd up``;
spread over hosts, the first member's host sets auth up and the others only serve.
``omega cell certs`` makes the CA, a server certificate naming every ``--host`` and client
certificates beforehand, on the host that keeps the CA key (docs/DEPLOY.md).

It prints the etcd version and, for a version whose RBAC has known holes
(``cellstate.rbac_gaps.RBAC_GAPS``), what a holder of any credential can still do; while it
serves, it reports early compactions and raised alarms as ``etcd: ALERT`` lines.

Registers ``up`` under the ``cell`` command of ``tools.cli.cell`` (listed after it
in ``COMMAND_MODULES``), or creates ``cell`` when that module is absent.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from cellstate.etcd.binary import EtcdError
from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.supervisor import RestartPolicy
from cellstate.keys import DEFAULT_ROOT
from tools.cli.etcd import (
    add_server_flags, announce_endpoints, client_port, cluster_kwargs, describe_members, port_in_use_hint,
    serve_until_stopped, server_options, start_timeout, stopped_on_interrupt,
)

GUARD_EVERY_S = 10.0


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
    up.add_argument("--client-cert-auth", action="store_true",
                    help="with --secure: clients must present a certificate of the cell's CA (mTLS); each "
                         "component's credential file then names its own, issued into DATA_DIR/credentials/")
    add_server_flags(up)
    up.set_defaults(func=run_up)
    certs = _cell_actions(sub).add_parser(
        "certs", help="make the CA, the server certificate for every member host and client certificates")
    certs.add_argument("--data-dir", required=True,
                       help="the data dir of `omega cell up --secure` (PKI in DATA_DIR/pki)")
    certs.add_argument("--host", action="append", dest="hosts", default=[], metavar="HOST",
                       help="an IP or name the members are reached at (repeat; loopback is always named)")
    certs.add_argument("--client", action="append", dest="clients", default=[], metavar="NAME",
                       help="issue a client certificate with CN NAME into DATA_DIR/credentials/NAME.pem/.key "
                            "(repeat; under --client-cert-auth the CN is the etcd user it acts as)")
    certs.set_defaults(func=run_certs)


def _options(args, data_dir: Path, placement) -> EtcdOptions:
    limits = server_options(args)
    if not args.secure:
        return EtcdOptions(**limits)
    from cellstate.security import secure_options

    return secure_options(data_dir / "pki", token_ttl=args.token_ttl, hosts=placement.hosts(),
                          client_cert_auth=args.client_cert_auth, **limits)


def _bootstrap(placement) -> bool:
    """Whether this host sets auth up: always on one host, on the first member's host when the
    cluster is spread over hosts (the others only serve; their credentials come from it)."""
    return not placement.per_host or placement.name == placement.initial_cluster[0].name


def _start(args, data_dir: Path):
    """(running cluster, Credentials or None); UsageError when etcd or auth setup fails."""
    from cellstate.pki import PkiError
    from cellstate.security import CREDENTIALS_DIR, LEGACY_CREDENTIALS_FILE, SecurityError, secure_cells
    from tools.cli import UsageError

    if args.members < 1:
        raise UsageError(f"--members must be >= 1, got {args.members}")
    if args.client_cert_auth and not args.secure:
        raise UsageError("--client-cert-auth needs --secure (client certificates are checked over TLS)")
    cells = args.cells or ["default"]
    port = client_port(args, data_dir)
    hosts = cluster_kwargs(args)
    try:
        cluster = EtcdCluster(options=_options(args, data_dir, hosts["placement"]), data_dir=str(data_dir),
                              client_port=port, **hosts)
        cluster.start(start_timeout(hosts["placement"]))
    except (EtcdError, PkiError) as exc:
        raise UsageError(port_in_use_hint(exc, args)) from None
    if not args.secure or not _bootstrap(hosts["placement"]):
        return cluster, None
    try:
        creds = secure_cells(cluster.endpoints, cells, data_dir / CREDENTIALS_DIR, args.root, cluster.ca_cert,
                             legacy_file=data_dir / LEGACY_CREDENTIALS_FILE,
                             client_certs_from=data_dir / "pki" if args.client_cert_auth else None)
    except SecurityError as exc:
        cluster.stop()
        raise UsageError(str(exc)) from None
    except BaseException:  # Ctrl-C while setting up auth: never leave the started etcd running
        cluster.stop()
        raise
    try:
        _metrics_files(data_dir)
    except (OSError, PkiError) as exc:
        cluster.stop()
        raise UsageError(f"cannot issue the metrics certificates: {exc}") from None
    return cluster, creds


METRICS_FILES = ("metrics-server.pem", "metrics-server.key", "metrics-scraper.pem", "metrics-scraper.key")


def _metrics_files(data_dir: Path) -> None:
    """Issue (or reuse) the metrics endpoints' server certificate and a scraper's client
    certificate from the cell's CA in ``DATA_DIR/pki`` (etcd's own), and copy them into
    ``DATA_DIR/credentials/`` (mode 0600) beside the CA certificate, where components get them."""
    from cellstate.pki import issue_metrics_certs
    from cellstate.security import CREDENTIALS_DIR

    issue_metrics_certs(data_dir / "pki")
    for name in METRICS_FILES:
        target = data_dir / CREDENTIALS_DIR / name
        shutil.copyfile(data_dir / "pki" / name, target)
        os.chmod(target, 0o600)


def _announce(cluster: EtcdCluster, data_dir: Path, creds) -> None:
    from cellstate.rbac_gaps import rbac_warning
    from cellstate.security import ADMIN_FILE, CREDENTIALS_DIR

    mode = " (plain)" if cluster.ca_cert is None else " (mTLS + auth)" if cluster.options.client_cert_auth \
        else " (TLS + auth)"
    announce_endpoints(cluster, mode)
    if cluster.ca_cert is not None and creds is None:
        first = cluster.placement.initial_cluster[0].name
        print(f"  auth is set up by member {first}'s host: the credential files come from its data dir", flush=True)
    if creds is not None:
        directory = data_dir / CREDENTIALS_DIR
        print(f"  CA certificate for clients: {creds.ca_cert}", flush=True)
        print(f"  credentials, one file per component (mode 0600; hand each only its own): {directory}/", flush=True)
        for name in sorted(creds.users):
            cred = creds.users[name]
            file = ADMIN_FILE if cred.cell is None else f"{name}.json"
            print(f"    {file:<28} {'root (admin only)' if cred.cell is None else cred.role}", flush=True)
        print(f"  e.g. omega check --cell CELL --credentials {directory}/CELL-monitor.json", flush=True)
        print(f"  metrics over TLS (client certificates of this CA): schedulers and agents take --metrics-cert "
              f"{directory}/metrics-server.pem --metrics-key {directory}/metrics-server.key --metrics-client-ca "
              f"{creds.ca_cert}; a scraper presents {directory}/metrics-scraper.pem and .key", flush=True)
        warning = rbac_warning(cluster.version)
        if warning:
            print("WARNING: " + warning, flush=True)
    describe_members(cluster)


def _guard(cluster: EtcdCluster, creds, retention: int):
    """(check for serve_until_stopped: early compactions and alarms seen as root, its closer)."""
    from cellstate.rbac_gaps import CompactionGuard
    from cellstate.security import ROOT_USER, AuthAdmin

    root = creds.user(ROOT_USER)
    admin = AuthAdmin(cluster.endpoints, creds.ca_cert, cert=root.cert, key=root.key)
    admin.login(ROOT_USER, creds.user(ROOT_USER).password)
    return CompactionGuard(admin, retention).check, admin.close


def run_up(args) -> int:
    temporary = args.data_dir is None
    data_dir = Path(tempfile.mkdtemp(prefix="omega-cell-")) if temporary else Path(args.data_dir)
    if args.secure:  # keys and credentials inside; etcd itself makes its member dirs 0700
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
    close = None
    try:
        cluster, creds = _start(args, data_dir)
        with stopped_on_interrupt(cluster):
            _announce(cluster, data_dir, creds)
            if args.secure and creds is None and args.cells:
                print(f"  --cell {', '.join(args.cells)}: not used on this host (cell users are made on the "
                      "first member's host)", flush=True)
            check = None
            if creds is not None:
                check, close = _guard(cluster, creds, args.auto_compaction_retention)
        return serve_until_stopped(cluster, RestartPolicy(max_restarts=args.max_restarts), check=check,
                                   check_every=GUARD_EVERY_S)
    finally:
        if close is not None:
            close()
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)


PKI_TO_COPY = ("ca.pem", "server.pem", "server.key", "jwt.key", "jwt.pub")


def run_certs(args) -> int:
    """``omega cell certs``: on the host holding the CA, make (or reuse) the CA, the server
    certificate naming every ``--host`` and the JWT keys in ``DATA_DIR/pki``, and client
    certificates for ``--client`` names; print what to copy to each member host."""
    from cellstate.pki import PkiError, ensure_jwt_keys, ensure_local_pki, issue_cert
    from cellstate.security import CREDENTIALS_DIR
    from tools.cli import UsageError

    data_dir = Path(args.data_dir)
    for name in args.clients:
        if not name or "/" in name or name in ("ca", "server", "jwt"):
            raise UsageError(f"--client {name!r}: a certificate name must be a file name other than ca, server, jwt")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        data_dir.chmod(0o700)
        pki = ensure_local_pki(data_dir / "pki", hosts=args.hosts)
        ensure_jwt_keys(data_dir / "pki")
        issued = [issue_cert(data_dir / "pki", name, hosts=(), server=False, client=True,
                             out=data_dir / CREDENTIALS_DIR) for name in args.clients]
    except (OSError, PkiError) as exc:
        raise UsageError(f"cell certs: {exc}") from None
    from cellstate.pki import cert_hosts

    print(f"server certificate {pki.server.cert} names: {', '.join(sorted(cert_hosts(pki.server.cert)))}", flush=True)
    print(f"  copy to DATA_DIR/pki/ on every member host (mode 0600 for the keys; never ca.key): "
          f"{' '.join(str(pki.directory / f) for f in PKI_TO_COPY)}", flush=True)
    for files in issued:
        print(f"client certificate {files.cert} key {files.key} (CA {files.ca})", flush=True)
    return 0
