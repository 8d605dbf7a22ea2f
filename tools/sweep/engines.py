"""Where a sweep's runs execute. An engine takes runs and yields ``Outcome``s as they finish, in
any order; each run is one task calling ``tools.sweep.run.execute`` in a worker process.

- ``LocalEngine``: a ``concurrent.futures.ProcessPoolExecutor`` of ``workers`` processes (default:
  the machine's cores), started by forkserver (spawn where there is none), so no worker inherits
  the parent's threads or state; the forkserver imports the replay first (``PRELOAD``).
- ``RayEngine``: ``ray.remote`` tasks of one CPU each, on a local Ray started for the sweep
  (``num_cpus`` = ``workers``, no dashboard, workers' logs not forwarded, every server on
  loopback: ``LOOPBACK_SWITCH``) or on the cluster at ``address``. Ray is the optional extra ``[sweep]``: ``ray_available`` checks for it first.

A run that raises is an ``Outcome`` with ``error`` set (one line: the exception), never an
exception of the engine; a worker that dies fails the runs it had.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Iterator

from tools.sweep.run import execute
from tools.sweep.spec import SweepRun

ENGINES = ("local", "ray")
PRELOAD = ["tools.sweep.run", "tools.fauxmaster.replay"]
"""Modules the local pool's forkserver imports before it forks the workers (half a second of CPU
each worker would spend importing the replay otherwise: docs/BENCHMARKS.md, "omega sweep")."""


class EngineError(RuntimeError):
    """The engine itself cannot run (a Ray that does not start or cannot be reached): one line."""


@dataclass
class Outcome:
    """A finished run: its summary, or the error that ended it."""

    run: SweepRun
    summary: dict[str, Any] | None = None
    error: str | None = None


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def guarded(run: SweepRun, out: str) -> tuple[dict[str, Any] | None, str | None]:
    """``execute(run, out)`` in a worker: (summary, None), or (None, the error in one line); the
    traceback goes to the worker's stderr."""
    try:
        return execute(run, out), None
    except Exception as exc:  # reported and retried by the driver, never lost
        traceback.print_exc()
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]


class LocalEngine:
    """Runs on a process pool of this machine (see the module docstring)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = workers or default_workers()

    def run(self, runs: list[SweepRun], out: str) -> Iterator[Outcome]:
        if not runs:
            return
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if context.get_start_method() == "forkserver":
            context.set_forkserver_preload(PRELOAD)  # imported once, not once per worker
        pool = ProcessPoolExecutor(min(self.workers, len(runs)), mp_context=context)
        try:
            pending = {pool.submit(guarded, run, out): run for run in runs}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    run = pending.pop(future)
                    try:
                        summary, error = future.result()
                    except Exception as exc:  # the worker died (BrokenProcessPool) or could not unpickle
                        summary, error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]
                    yield Outcome(run, summary, error)
        finally:  # interrupted: the runs not started are dropped, the running ones end first
            pool.shutdown(wait=True, cancel_futures=True)


def ray_available() -> bool:
    """Whether ``ray`` can be imported (looked up without importing it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Read by Ray when imported: "0" keeps a local Ray's node on 127.0.0.1 (``RayEngine.run``)."""


class RayEngine:
    """Runs as Ray tasks (see the module docstring)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        self.address = address
        self.workers = workers or default_workers()

    def run(self, runs: list[SweepRun], out: str) -> Iterator[Outcome]:
        if not runs:
            return
        if not self.address or _loopback(self.address):
            # Ray resolves a local node's address (and a loopback --address) to the host's outward
            # IP, binding and connecting there, unless its "no cluster" switch is set: with it,
            # every server binds loopback only.
            os.environ[LOOPBACK_SWITCH] = "0"
        import ray

        started = not ray.is_initialized()
        if started:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                       "configure_logging": False}
            try:
                if self.address:
                    ray.init(address=self.address, **options)
                else:
                    ray.init(num_cpus=self.workers, **options)
            except Exception as exc:  # unreachable, refused, a version mismatch…
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
                raise EngineError(f"cannot start {where}: {exc}".splitlines()[0]) from None
        try:
            task = ray.remote(num_cpus=1, max_retries=0)(guarded)
            pending = {task.remote(run, out): run for run in runs}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    run = pending.pop(ref)
                    try:
                        summary, error = ray.get(ref)
                    except Exception as exc:  # the worker died, or the task could not run
                        summary, error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]
                    yield Outcome(run, summary, error)
        finally:
            if started:
                ray.shutdown()


def _loopback(address: str) -> bool:
    import ipaddress

    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_engine(name: str, address: str | None = None, workers: int | None = None):
    """The engine called ``name`` (``ENGINES``); ValueError for another name."""
    if name == "local":
        return LocalEngine(workers)
    if name == "ray":
        return RayEngine(address, workers)
    raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
