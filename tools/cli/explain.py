"""``omega explain JOB [TASK]``: why a task of a job goes where it goes, or stays pending."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from cellstate.store import StoreError
from tools.cli.common import add_output_arg, add_store_args, cell_keys, connect, output_json, store_failure


def register(sub) -> None:
    p = sub.add_parser("explain", help="run a scheduler chain for one task and show every filter and score")
    add_store_args(p)
    p.add_argument("job", help="job id")
    p.add_argument("task", nargs="?", type=int, default=None, help="task index (default: the first pending)")
    p.add_argument("--kind", default="borg", help="scheduler kind whose default chain to run (default borg)")
    p.add_argument("--chains", default=None, help="a chain TOML file (see schedulers/default_chains.toml)")
    p.add_argument("--table", default=None, help="table of --chains to use (default: --kind)")
    p.add_argument("--top", type=int, default=5, help="machines to show (default 5)")
    add_output_arg(p)
    p.set_defaults(func=run)


def _scheduler(args):
    """The scheduler whose chain is explained, from --kind or --chains/--table."""
    from schedulers.chain_config import load_chain_config
    from schedulers.chains import make_scheduler
    from schedulers.plugin import PluginConfigError
    from tools.cli import InputError, UsageError

    try:
        if args.chains is None:
            if args.table is not None:
                raise UsageError("--table needs --chains")
            return make_scheduler(args.kind, "explain", 0)
        configs = load_chain_config(args.chains)
        table = args.table or args.kind
        if table not in configs:
            raise UsageError(f"--table: {args.chains} has no table [{table}]; tables: {sorted(configs)}")
        config = configs[table]
        return make_scheduler(config.kind, "explain", 0, config.as_config())
    except OSError as exc:
        raise UsageError(f"--chains {args.chains}: {exc.strerror or exc}") from None
    except PluginConfigError as exc:
        raise (InputError if args.chains else UsageError)(str(exc)) from None


def _live_of_class(replica, scheduler_class: str) -> tuple[str, ...]:
    """Names of the live schedulers (leased stats keys) of ``scheduler_class``; stats that do not
    decode are skipped."""
    from tools.monitor.model import decode_all_stats

    stats, _ = decode_all_stats(replica.stats())
    return tuple(sorted(s.name for s in stats if s.kind == scheduler_class))


def run(args) -> int:
    from cellstate.replica.watched import Replica
    from tools.cli import InputError, UsageError
    from tools.explain import ExplainError, explain, render

    if args.top < 1:
        raise UsageError(f"--top must be >= 1, got {args.top}")
    scheduler = _scheduler(args)
    keys = cell_keys(args)
    with connect(args) as store:
        # Values that do not decode (an unknown schema version…) are quarantined and told below,
        # in one line, instead of one log warning each.
        replica = Replica(store, keys, on_decode_error=lambda key, error: None)
        try:
            replica.sync()
            why = replica.quarantine.get(keys.job(args.job))
            if why is not None:
                raise InputError(f"job {args.job!r}: its record does not decode: {why}")
            if replica.job(args.job) is None:  # like kill and job status: a runtime error, not usage
                print(f"omega: explain: no job {args.job!r} in cell {keys.cell!r} (omega job list shows its jobs)",
                      file=sys.stderr)
                return 1
            result = explain(replica, args.job, args.task, scheduler.pipeline, args.top, scheduler)
            result = replace(result, served_by=_live_of_class(replica, result.scheduler_class))
        except StoreError as exc:
            print(f"omega: explain: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        except ExplainError as exc:
            raise UsageError(str(exc)) from None
        finally:
            replica.close()
    if replica.quarantine:
        why = next(iter(replica.quarantine.values()))
        print(f"omega: explain: left out {len(replica.quarantine)} value(s) that do not decode (first: {why})",
              file=sys.stderr)
    print(json.dumps(result.to_dict(), indent=2) if output_json(args) else render(result))
    return 0
