"""``omega etcd up``: run an embedded etcd in the foreground until interrupted.

Members that exit on their own are restarted on their data directory (``EtcdCluster.supervise``)
while the others keep serving; with ``--data-dir`` the ports are recorded there, so the same
command started again later brings the same cluster back with its data.
"""

from __future__ import annotations

import signal
import threading

from cellstate.etcd_server import (
    DEFAULT_COMPACTION_RETENTION, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS, DEFAULT_QUOTA_BACKEND_BYTES,
    EtcdCluster, EtcdError, EtcdOptions, RestartPolicy,
)


def add_server_flags(parser) -> None:
    """The etcd server flags shared by ``omega etcd up`` and ``omega cell up``."""
    parser.add_argument("--members", type=int, default=1, help="cluster size (default 1)")
    parser.add_argument("--port", type=int, default=None, help="client port of the first member (default: free)")
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


def server_options(args) -> dict:
    """EtcdOptions keyword arguments of ``add_server_flags``' flags."""
    return dict(max_txn_ops=args.max_txn_ops, max_request_bytes=args.max_request_bytes,
                quota_backend_bytes=args.quota_backend_bytes,
                auto_compaction_retention=args.auto_compaction_retention, unsafe_no_fsync=args.no_fsync)


def register(sub) -> None:
    etcd = sub.add_parser("etcd", help="embedded etcd server")
    etcd_sub = etcd.add_subparsers(dest="etcd_command", required=True, metavar="ACTION")
    up = etcd_sub.add_parser("up", help="start a real etcd on loopback and wait for Ctrl-C")
    up.add_argument("--data-dir", default=None,
                    help="keep data (and the member ports) here; starting again on it restarts the same "
                         "cluster (default: a temp dir removed on exit)")
    add_server_flags(up)
    up.set_defaults(func=run_up)


def run_up(args) -> int:
    from tools.cli import UsageError

    if args.members < 1:
        raise UsageError(f"--members must be >= 1, got {args.members}")
    try:
        cluster = EtcdCluster(size=args.members, options=EtcdOptions(**server_options(args)),
                              data_dir=args.data_dir, client_port=args.port)
        cluster.start()
    except EtcdError as exc:
        raise UsageError(str(exc)) from None
    print("etcd up; endpoints: " + ",".join(cluster.endpoints), flush=True)
    describe_members(cluster)
    return serve_until_stopped(cluster, RestartPolicy(max_restarts=args.max_restarts))


def describe_members(cluster: EtcdCluster) -> None:
    """One line per member: name, pid, client and peer ports, data directory."""
    for m in cluster.members:
        print(f"  member {m.spec.name} pid {m.pid} client {m.spec.client_url} peer {m.spec.peer_url} "
              f"data {m.data_dir}", flush=True)


def serve_until_stopped(cluster: EtcdCluster, policy: RestartPolicy | None = None) -> int:
    """Keep ``cluster`` up until SIGINT/SIGTERM (0), restarting members that exit; 1 when so many
    members were left down (restarting too often) that the cluster lost its quorum. Then stop it."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    supervisor = cluster.supervise(policy, report=lambda line: print(f"etcd: {line}", flush=True))
    try:
        while not stop.wait(0.5):
            if supervisor.quorum_lost():
                print(f"etcd: quorum lost (left down: {', '.join(sorted(supervisor.given_up))}); stopping",
                      flush=True)
                return 1
    finally:
        cluster.stop()
        print("etcd stopped", flush=True)
    return 0
