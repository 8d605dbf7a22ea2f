"""``omega agents run``: hollow machine agents — one process simulating many machines of a cell.

They mark placed tasks running, end batch tasks after their duration (``--time-scale`` runs
simulated time faster), fail machines (``--fail``, or at random with ``--fail-rate``), repair
them after ``--repair-after`` seconds and drain machines (``--drain``). Machines come from
``omega cell init``; with ``--init-spec``/``--init-machines`` the agents register them first.
Stops cleanly on SIGINT/SIGTERM (or after ``--duration`` seconds; ``--run-for`` is its older spelling).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from tools.cli.common import add_store_args, cell_keys, connect, exit_once_stopped, store_failure
from tools.cli.progress import Progress, add_progress_arg, progress_every

if TYPE_CHECKING:
    from tools.agents.metrics import AgentMetrics


def register(sub) -> None:
    agents = sub.add_parser("agents", help="hollow machine agents")
    agents_sub = agents.add_subparsers(dest="agents_command", required=True, metavar="ACTION")
    run = agents_sub.add_parser("run", help="simulate the machines of a cell until interrupted")
    run.add_argument("--machines", default="all", metavar="all|PREFIX|ID,ID…",
                     help="which machines this process simulates (default: all)")
    run.add_argument("--name", default="agents", help='agent name; ledgers record "agent:NAME" (default agents)')
    run.add_argument("--time-scale", type=float, default=1.0,
                     help="simulated seconds per real second: task durations, failure rate and repair "
                          "time run this much faster (default 1.0)")
    run.add_argument("--fail-rate", type=float, default=0.0, metavar="PER_MACHINE_PER_HOUR",
                     help="random machine failures per machine per hour (default 0: none)")
    run.add_argument("--repair-after", type=float, default=0.0, metavar="SECONDS",
                     help="repair a failed machine after this long (default 0: never)")
    run.add_argument("--fail", action="append", default=[], metavar="ID", help="fail this machine at start")
    run.add_argument("--drain", action="append", default=[], metavar="ID", help="drain this machine at start")
    run.add_argument("--seed", type=int, default=0, help="seed of the random failures (default 0)")
    from tools.cli.metrics_args import add_metrics_args

    add_metrics_args(run)
    run.add_argument("--duration", type=float, default=0.0, metavar="SECONDS",
                     help="stop after this long (default 0: until SIGINT/SIGTERM)")
    run.add_argument("--run-for", dest="duration", type=float, help=argparse.SUPPRESS)  # its older spelling
    add_progress_arg(run)
    run.add_argument("--init-spec", metavar="FILE", help="register the machines of this cell spec first")
    run.add_argument("--init-machines", type=int, metavar="N",
                     help="register N machines first (the demo spec, or --init-spec with N machines)")
    add_store_args(run)
    run.set_defaults(func=run_agents)


# The agent, cell-spec and store modules are imported where they are used (a light parser).


def config_from_args(args):
    """The AgentConfig of the flags; UsageError naming the flag otherwise."""
    from tools.agents.agent import AgentConfig
    from tools.agents.lifecycle import MachineSelector
    from tools.cli import UsageError

    try:
        selector = MachineSelector.parse(args.machines)
        return AgentConfig(name=args.name, machines=selector, time_scale=args.time_scale,
                           fail_rate=args.fail_rate, repair_after=args.repair_after, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def init_spec_from_args(args):
    """The cell spec to register first (None: use the machines already in the cell)."""
    from cellstate.cellspec import CellSpec, CellSpecError, load_cell_spec
    from tools.cli import InputError, UsageError
    from tools.cli.common import readable_file

    if args.init_spec is None and args.init_machines is None:
        return None
    try:
        spec = load_cell_spec(readable_file(args.init_spec, "--init-spec")) if args.init_spec else CellSpec()
    except CellSpecError as exc:
        raise InputError(f"--init-spec: {exc}") from None
    try:
        return spec if args.init_machines is None else replace(spec, machines=args.init_machines)
    except CellSpecError as exc:
        raise UsageError(f"--init-machines: {exc}") from None


def run_agents(args) -> int:
    from cellstate.store import StoreError
    from tools.agents.agent import Agent
    from tools.agents.metrics import AgentMetrics
    from tools.cli import UsageError

    config = config_from_args(args)
    spec = init_spec_from_args(args)
    progress_every(args)
    if args.duration < 0:
        raise UsageError(f"--duration must be >= 0 seconds, got {args.duration:g}")
    from tools.cli.metrics_args import metrics_from_args

    try:
        serving = metrics_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    keys = cell_keys(args)
    # With --init-spec/--init-machines the agents create the cell; else it must exist.
    with connect(args, existing_cell=spec is None) as store:
        if spec is not None:
            try:
                _register(store, keys, spec)
            except StoreError as exc:
                print(f"omega: agents: {store_failure(exc, args)}", file=sys.stderr)
                return 1
        metrics = AgentMetrics(cell=keys.cell, agent=config.name)
        agent = Agent(store, keys, config, metrics)
        metrics.watch_replica(agent.replica, store.revision)
        try:
            if serving is not None and not _serve(metrics, serving):
                return 1
            return _run(agent, args)
        except StoreError as exc:
            print(f"omega: agents: {store_failure(exc, args)}", file=sys.stderr)
            return 1
        except ValueError as exc:
            print(f"omega: agents: {exc}", file=sys.stderr)
            return 1
        finally:
            agent.close()
            metrics.close()


def _register(store, keys, spec) -> None:
    from cellstate.cellspec import CellExists, init_cell

    try:
        revision = init_cell(store, keys, spec)
        print(f"registered {spec.machines} machines in cell {keys.cell!r} at revision {revision}", flush=True)
    except CellExists:
        print(f"using the machines already in cell {keys.cell!r} (`omega cell init --replace` "
              "starts a fresh one)", flush=True)


def _run(agent, args) -> int:
    """Start, apply --fail/--drain, run until a signal or --duration."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    if args.duration:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    try:
        agent.start()
        _check_selected(agent, args.fail + args.drain)
        for machine_id in args.fail:
            agent.fail(machine_id)
        for machine_id in args.drain:
            agent.drain(machine_id)
        print(f"agents {agent.config.name!r} simulating {int(agent.metrics.value('omega_agent_machines'))} "
              f"machines of cell {agent.keys.cell!r}", flush=True)
        with Progress(f"agents {agent.config.name}", progress_every(args), lambda: _progress_line(agent)) as progress:
            agent.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    finished = int(agent.metrics.value("omega_agent_tasks_finished_total"))
    print(f"agents stopped: {finished} task(s) finished", flush=True)
    progress.print(f"stopped after {progress.elapsed()}: {_progress_line(agent)}")
    exit_once_stopped(0)
    return 0


def _progress_line(agent) -> str:
    """The agents' totals so far: machines, tasks started/finished/running, machine failures."""
    value = agent.metrics.value
    return (f"{int(value('omega_agent_machines'))} machines, {int(value('omega_agent_tasks_started_total'))} tasks "
            f"started, {int(value('omega_agent_tasks_finished_total'))} finished, "
            f"{int(value('omega_agent_running_tasks'))} running, "
            f"{int(value('omega_agent_machine_failures_total'))} machine failures")


def _check_selected(agent, machine_ids: list[str]) -> None:
    from tools.cli import UsageError

    for machine_id in machine_ids:
        if agent.replica.machine(machine_id) is None:
            raise UsageError(f"--fail/--drain: no machine {machine_id!r} in cell {agent.keys.cell!r}")
        if not agent.is_mine(machine_id):
            raise UsageError(f"--fail/--drain: machine {machine_id!r} is not among the --machines selected")


def _serve(metrics: AgentMetrics, serving) -> bool:
    """Serve the metrics at ``serving`` (host, port, tls) and say where; False (and why) if it cannot."""
    from tools.metrics.endpoint import MetricsError

    try:
        metrics.serve(serving[1], serving[0], serving[2])
    except MetricsError as exc:
        print(f"omega: agents: {exc}", file=sys.stderr)
        return False
    print(f"metrics on {metrics.url}", flush=True)
    return True
