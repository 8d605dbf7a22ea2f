"""``omega demo``: a live cell on this machine — embedded etcd, hollow machine agents, several
schedulers, a workload generator and the conflict monitor — stopped together by Ctrl-C.

With ``--duration`` it ends by itself and prints a summary (placements, transactions and
conflicts per scheduler, utilization, pending queues, the invariant check). Exit status: 0
when the cell's invariants hold and no child process failed, 1 otherwise, 2 for bad flags.
"""

from __future__ import annotations

import json
import sys

from cellstate.etcd.binary import EtcdError
from cellstate.etcd.options import DEFAULT_COMPACTION_RETENTION, DEFAULT_QUOTA_BACKEND_BYTES
from cellstate.store import StoreError


def register(sub) -> None:
    demo = sub.add_parser("demo", help="run a live demo cell (etcd, agents, schedulers, generator, monitor)")
    demo.add_argument("--machines", type=int, default=1000, help="machines in the cell (default 1000)")
    demo.add_argument("--zones", type=int, default=3, help="zones (default 3)")
    demo.add_argument("--batch-schedulers", type=int, default=2, metavar="N", help="batch schedulers (default 2)")
    demo.add_argument("--service-schedulers", type=int, default=1, metavar="N",
                      help="service schedulers (default 1)")
    demo.add_argument("--borg-schedulers", type=int, default=1, metavar="N",
                      help="Borg-style schedulers (default 1)")
    demo.add_argument("--solver-schedulers", type=int, default=0, metavar="N",
                      help="DCM-style CP-SAT solver schedulers (default 0)")
    demo.add_argument("--rate", type=float, default=40.0, metavar="JOBS/S",
                      help="job arrivals per second, all kinds (default 40)")
    demo.add_argument("--service-fraction", type=float, default=0.1, help="share of service jobs (default 0.1)")
    demo.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                      help="stop after this long and print a summary (default: until Ctrl-C)")
    demo.add_argument("--seed", type=int, default=1, help="seed of the cell, workload and schedulers (default 1)")
    demo.add_argument("--no-monitor", dest="monitor", action="store_false",
                      help="no live monitor: print a status line every few seconds")
    demo.add_argument("--conflict-mode", default="resource-fit", help="sequence | resource-fit (default)")
    demo.add_argument("--time-scale", type=float, default=30.0,
                      help="simulated seconds per real second for the agents: batch tasks end this much "
                           "faster (default 30)")
    demo.add_argument("--steal-after", type=float, default=None, metavar="SECONDS",
                      help="a job pending this long may be taken by any scheduler of its class, which then "
                           "race over it (default: never)")
    demo.add_argument("--secure", action="store_true",
                      help="etcd with TLS and auth; every process logs in as its cell user")
    demo.add_argument("--gpu", action="store_true",
                      help="a GPU cell: GPU machines, GPU tasks, batch schedulers scoring by fragmentation (fgd)")
    demo.add_argument("--cell", default="demo", help="cell name (default demo)")
    demo.add_argument("--etcd-compaction-retention", type=int, default=DEFAULT_COMPACTION_RETENTION,
                      metavar="REVISIONS", help="etcd auto-compaction keeps this many revisions; 0: off "
                                                f"(default {DEFAULT_COMPACTION_RETENTION})")
    demo.add_argument("--etcd-quota-bytes", type=int, default=DEFAULT_QUOTA_BACKEND_BYTES, metavar="BYTES",
                      help=f"etcd backend quota (default {DEFAULT_QUOTA_BACKEND_BYTES})")
    demo.add_argument("--run-dir", metavar="DIR", help="logs of the processes here (default: a new temp dir)")
    demo.add_argument("--summary-json", metavar="FILE", help="also write the summary as JSON to FILE")
    demo.add_argument("-o", "--output", choices=("table", "json"), default="table",
                      help="print the closing summary as a table (default) or as JSON on stdout")
    demo.set_defaults(func=run)


def config_from_args(args):
    """The DemoConfig of the flags; UsageError naming what is wrong."""
    from omega.modes import ConflictMode
    from tools.cli import UsageError
    from tools.demo.cell import DemoConfig

    try:
        ConflictMode.parse(args.conflict_mode)
        return DemoConfig(
            machines=args.machines, zones=args.zones, batch_schedulers=args.batch_schedulers,
            service_schedulers=args.service_schedulers, borg_schedulers=args.borg_schedulers,
            solver_schedulers=args.solver_schedulers,
            rate=args.rate, service_fraction=args.service_fraction, duration=args.duration, seed=args.seed,
            monitor=args.monitor, conflict_mode=args.conflict_mode, time_scale=args.time_scale,
            steal_after=args.steal_after, secure=args.secure, cell=args.cell,
            etcd_compaction_retention=args.etcd_compaction_retention, etcd_quota_bytes=args.etcd_quota_bytes,
            gpu=args.gpu)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run(args) -> int:
    from tools.demo.cell import run_demo
    from tools.demo.summary import print_summary

    config = config_from_args(args)
    if args.solver_schedulers > 0:  # the solver extra: checked before anything starts
        from tools.cli.common import require_optional
        require_optional("ortools", "demo --solver-schedulers")
    try:
        summary = run_demo(config, sys.stdout, args.run_dir)
    except (EtcdError, StoreError, RuntimeError, OSError) as exc:
        print(f"omega: demo: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(summary.to_dict(), indent=1))
    else:
        print_summary(summary, sys.stdout)
    if args.summary_json:
        try:
            with open(args.summary_json, "w") as f:
                json.dump(summary.to_dict(), f, indent=1)
        except OSError as exc:
            print(f"omega: demo: --summary-json {args.summary_json}: {exc.strerror}", file=sys.stderr)
            return 1
    return 0 if summary.ok else 1
