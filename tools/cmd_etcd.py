"""``omega etcd up``: run an embedded etcd in the foreground until interrupted."""

from __future__ import annotations

import signal
import threading

from cellstate.etcd_server import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TXN_OPS, EtcdCluster, EtcdError, EtcdOptions


def register(sub) -> None:
    etcd = sub.add_parser("etcd", help="embedded etcd server")
    etcd_sub = etcd.add_subparsers(dest="etcd_command", required=True, metavar="ACTION")
    up = etcd_sub.add_parser("up", help="start a real etcd on loopback and wait for Ctrl-C")
    up.add_argument("--members", type=int, default=1, help="cluster size (default 1)")
    up.add_argument("--port", type=int, default=None, help="client port of the first member (default: free)")
    up.add_argument("--data-dir", default=None, help="keep data here (default: a temp dir removed on exit)")
    up.add_argument("--max-txn-ops", type=int, default=DEFAULT_MAX_TXN_OPS)
    up.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    up.add_argument("--no-fsync", action="store_true", help="unsafe: skip fsync (tests, demos)")
    up.set_defaults(func=run_up)


def run_up(args) -> int:
    from tools.cli import UsageError

    options = EtcdOptions(max_txn_ops=args.max_txn_ops, max_request_bytes=args.max_request_bytes,
                          unsafe_no_fsync=args.no_fsync)
    try:
        cluster = EtcdCluster(size=args.members, options=options, data_dir=args.data_dir, client_port=args.port)
        cluster.start()
    except EtcdError as exc:
        raise UsageError(str(exc)) from None
    print("etcd up; endpoints: " + ",".join(cluster.endpoints), flush=True)
    return serve_until_stopped(cluster)


def serve_until_stopped(cluster: EtcdCluster) -> int:
    """Keep ``cluster`` up until SIGINT/SIGTERM (0) or until a member exits (1); then stop it."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            dead = [m.spec.name for m in cluster.members if not m.running]
            if dead:
                print(f"etcd member(s) exited: {', '.join(dead)}", flush=True)
                return 1
    finally:
        cluster.stop()
        print("etcd stopped", flush=True)
    return 0
