"""``SchedulerProcess``: one process is one scheduler (name, kind, config) serving a cell.

The process owns a ``SchedulerCell`` (a placement view kept current from the store's
watch), an ``OptimisticPlacer``, a ``JobQueue`` and a ``SchedulingCycle`` (assembled by
``omega.host.assemble``, as the fauxmaster's replayed process is: the scheduler is attached to
this process, so EASY's holds and the nothing-fits memo filter its candidates here too), a
``StatsRecorder``, a ``StatsSink`` and a ``Clock``. Its work loop runs in a worker thread (``anyio.to_thread.run_sync``) so that the
event loop stays free for signals and for the stats task, which publishes every
``stats_interval_s``:

the scheduling cycle (``omega.cycle.SchedulingCycle``, the one loop the fauxmaster drives too):
each round brings the view up to date, refreshes the candidates (pending jobs of the scheduler's
class: a job's ``scheduler``, else its kind's, ``Job.scheduler_class``; this process's class is
its scheduler's kind), chooses up to ``batch_jobs`` in the queue order (fair or drf), shared with
the live peers of the class by rendezvous (one owner per job, taken over by another peer only
when the owner's stats lease expired; ``steal_after_s`` None, the default), and places each
(decide, commit, resolve conflicts; the resource-fit rebase pumps the view before a retry).
With nothing to do, the process waits on the watch until something changes or a deferred
job is due.

``stop()`` (SIGINT/SIGTERM when ``run(handle_signals=True)``, or ``duration_s``) lets the
current placement finish its commits, then the stats lease is revoked and the view closed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Protocol

import anyio
import anyio.to_thread

from omega.attempts import Attempt, PlacementResult
from omega.host import CycleOptions, HostedScheduler, assemble
from omega.modes import CommitMode, ConflictMode
from cellstate.plan import Claim, JobEntry
from omega.cycle import CycleView
from omega.protocols import CellView, Clock, Committer, Decision
from omega.queue import check_order
from omega.retry import RetryPolicy
from cellstate.scheduler_stats import SchedulerStats
from omega.stats import StatsRecorder

log = logging.getLogger(__name__)


class SchedulerCell(CycleView, Protocol):
    """The view a scheduler process works on (``cellstate.replica.view.ReplicaView``): the
    cycle's view with its change feed, refreshed by commits, pumped from the store's watch."""

    def pump(self, timeout: float = 0.0) -> int:
        """Apply ready watch batches, waiting up to ``timeout`` s for the first; how many changed."""
        ...

    def peers(self, kind: str) -> list[str]:
        """Live schedulers of ``kind`` (from their leased stats keys)."""
        ...

    def close(self) -> None: ...


class StatsSink(Protocol):
    """Where a scheduler's stats go (``cellstate.stats_sink.LeasedStatsSink``)."""

    def publish(self, stats: SchedulerStats) -> None: ...

    def close(self) -> None: ...


class SystemClock:
    """Wall-clock time (epoch seconds, as job submission times are)."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """Knobs of the work loop. ``duration_s`` 0: run until stopped. ``transient_errors``:
    exceptions of a round (store outages) that are logged and retried after ``error_wait_s``.
    ``order``: the queue order, "fair" or "drf" (``omega.queue.make_order``); ``drf_weights``:
    owner → weight for "drf" (default 1 each). ``skip_nothing_fits``: a scheduler whose
    unplaced tasks mean no room may set its jobs aside while nothing fits (its memo)."""

    batch_jobs: int = 16
    steal_after_s: float | None = None
    stats_interval_s: float = 1.0
    idle_wait_s: float = 0.2
    error_wait_s: float = 1.0
    duration_s: float = 0.0
    transient_errors: tuple[type[BaseException], ...] = ()
    order: str = "fair"
    drf_weights: Mapping[str, float] = field(default_factory=dict)
    skip_nothing_fits: bool = True

    def __post_init__(self) -> None:
        check_order(self.order, self.drf_weights)
        if type(self.batch_jobs) is not int or self.batch_jobs < 1:
            raise ValueError(f"batch_jobs must be an int >= 1, got {self.batch_jobs!r}")
        if self.steal_after_s is not None and not self.steal_after_s >= 0:
            raise ValueError(f"steal_after_s must be >= 0 seconds or None, got {self.steal_after_s!r}")
        for name in ("duration_s",):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {getattr(self, name)!r}")
        for name in ("stats_interval_s", "idle_wait_s", "error_wait_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)!r}")


def kv(**fields: object) -> str:
    """``key=value`` pairs for a log line; values with spaces are quoted."""
    parts = []
    for key, value in fields.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        parts.append(f'{key}="{text}"' if (" " in text or not text) else f"{key}={text}")
    return " ".join(parts)


class SchedulerProcess:
    """One scheduler serving one cell (see the module docstring). ``retry``: its kind's policy
    (``schedulers.chains.retry_policy_for``: the core keeps no table of kinds)."""

    def __init__(self, scheduler: HostedScheduler, view: SchedulerCell, committer: Committer, sink: StatsSink, *,
                 retry: RetryPolicy, conflict_mode: ConflictMode = ConflictMode.RESOURCE_FIT,
                 commit_mode: CommitMode = CommitMode.INCREMENTAL,
                 clock: Clock | None = None, options: RuntimeOptions = RuntimeOptions(),
                 observers: Iterable[Callable[[Attempt], None]] = ()):
        self.scheduler = scheduler
        self.name = scheduler.name
        self.kind = scheduler.kind
        self.view = view
        self.sink = sink
        self.clock: Clock = clock or SystemClock()
        self.options = options
        self.observers = list(observers)
        self.scheduler_class = self.kind  # the jobs it serves: those whose scheduler_class this is
        assembly = assemble(scheduler, (self.scheduler_class,), view, committer, self, self.clock, CycleOptions(
            retry, conflict_mode, commit_mode, options.order, options.drf_weights, options.steal_after_s,
            options.batch_jobs, options.skip_nothing_fits), on_attempt=self._on_attempt, refresh=self.catch_up)
        self.placer, self.queue, self.cycle = assembly.placer, assembly.queue, assembly.cycle
        self.refused = self.cycle.refused  # refused jobs stay out until they change
        self.recorder = StatsRecorder(self.name, self.kind, pid=os.getpid(), host=socket.gethostname(),
                                      started_at=self.clock.now(), conflict_mode=conflict_mode.value.label,
                                      commit_mode=commit_mode.value.label)
        self._stats_lock = threading.Lock()
        self._stop = threading.Event()
        self._last_unplaced = 0
        self.final_stats: SchedulerStats | None = None

    # -- control ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to stop after the current placement (thread-safe, idempotent)."""
        self._stop.set()

    def snapshot(self) -> SchedulerStats:
        with self._stats_lock:
            return self.recorder.snapshot(self.clock.now())

    async def run(self, handle_signals: bool = True) -> SchedulerStats:
        """Serve until stopped; then publish nothing more, revoke the stats lease, close the
        view. Returns the final stats. Signals need the main thread (``handle_signals``)."""
        try:
            await anyio.to_thread.run_sync(self._publish)
            async with anyio.create_task_group() as tg:
                if handle_signals:
                    tg.start_soon(self._stop_on_signals)
                tg.start_soon(self._publish_every_interval)
                if self.options.duration_s:
                    tg.start_soon(self._stop_after, self.options.duration_s)
                try:
                    await anyio.to_thread.run_sync(self._work)
                finally:
                    self._stop.set()
                    tg.cancel_scope.cancel()
        finally:
            self.final_stats = self.snapshot()
            self._close()
        return self.final_stats

    def _close(self) -> None:
        for what, close in (("stats sink", self.sink.close), ("view", self.view.close)):
            try:
                close()
            except Exception:  # closing must go on: the other resource still needs closing
                log.exception("closing the %s of %s failed", what, self.name)

    async def _stop_on_signals(self) -> None:
        import signal

        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:  # keeps receiving: a second signal must not kill the shutdown
                log.info("stopping %s", kv(scheduler=self.name, signal=signal.Signals(signum).name))
                self.stop()

    async def _stop_after(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        log.info("stopping %s", kv(scheduler=self.name, after_s=float(seconds)))
        self.stop()

    async def _publish_every_interval(self) -> None:
        while True:
            await anyio.sleep(self.options.stats_interval_s)
            await anyio.to_thread.run_sync(self._publish)

    def _publish(self) -> None:
        try:
            self.sink.publish(self.snapshot())
        except Exception as exc:  # a missed publish is retried next interval; the lease covers 3
            log.warning("stats publish failed %s", kv(scheduler=self.name, error=str(exc)))

    # -- the work loop (worker thread) ------------------------------------------------------

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.work_round():
                    self._idle()
            except self.options.transient_errors as exc:
                log.warning("scheduling round failed, retrying %s",
                            kv(scheduler=self.name, error=str(exc), wait_s=self.options.error_wait_s))
                self._stop.wait(self.options.error_wait_s)

    def work_round(self) -> int:
        """One round of the scheduling cycle. Returns how many jobs were taken."""
        return self.cycle.round()

    def place(self, job_id: str) -> PlacementResult | None:
        """Place one job's pending tasks now (``SchedulingCycle.place``); None when it is not
        pending for this scheduler, refused or its plan rejected."""
        entry = self.view.job(job_id)
        return None if entry is None else self.cycle.place(entry)

    def _idle(self) -> None:
        """Wait on the watch until the cell changes or the next deferred job is due."""
        wait = self.options.idle_wait_s
        now = self.clock.now()
        due = self.cycle.next_wake(now)
        if due is not None:
            wait = min(wait, max(0.0, due - now))
        self.view.pump(wait)

    # -- what the cycle asks of its host (omega.cycle.CycleHost) ------------------------------

    def catch_up(self) -> None:
        self.view.pump(0.0)

    def peers(self) -> list[str]:
        return self.view.peers(self.kind)

    def decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        return self._decide(job, tasks, view)

    def taken(self, entry: JobEntry) -> None:
        pass

    def placed(self, entry: JobEntry, result: PlacementResult | None) -> None:
        pass

    def stopping(self) -> bool:
        """True once ``stop()`` was asked."""
        return self._stop.is_set()

    def _decide(self, job: JobEntry, tasks: list[int], view: CellView) -> Decision:
        """The scheduler's decision as omega's ``Decision``."""
        decision = self.scheduler.decide(job, tasks, view)
        claims: list[Claim] = list(decision.claims)
        self._last_unplaced = len(decision.unplaced)
        return Decision(claims, dict(decision.unplaced))

    # -- attempts -----------------------------------------------------------------------------

    def _on_attempt(self, attempt: Attempt) -> None:
        now = self.clock.now()
        winners = {}
        writers = attempt.conflict_writers
        for i, machine_id in enumerate(attempt.conflicting_machines):
            writer = writers[i] if i < len(writers) else ""
            if not writer:  # (not known at the conflict: the machine's writer now)
                entry = self.view.machine(machine_id)
                writer = entry.machine.writer if entry is not None else ""
            winners[machine_id] = writer
        job = self.view.job(attempt.job_id)
        job_placed = bool(attempt.committed) and job is not None and not job.record.pending_tasks()
        unplaced, self._last_unplaced = self._last_unplaced, 0
        with self._stats_lock:
            self.recorder.record_attempt(
                decision_s=attempt.decision_time_s, busy_s=max(0.0, now - attempt.started_at),
                txns=attempt.transactions, commits=attempt.transactions - attempt.failed_transactions,
                conflicts=attempt.conflict_transactions, stale_retries=attempt.stale_retries,
                job_conflicts=attempt.job_conflicts,
                retries=int(attempt.retries > 0),
                tasks_placed=len(attempt.committed), tasks_unplaced=unplaced, job_placed=job_placed,
                conflict_machines=winners, job_id=attempt.job_id, now=now)
        self._log(attempt, winners)
        for observe in self.observers:
            observe(attempt)

    def _log(self, attempt: Attempt, winners: dict[str, str]) -> None:
        if attempt.conflicted:
            log.info("conflict %s", kv(scheduler=self.name, job=attempt.job_id, machines=list(winners),
                                       winners=sorted(set(w for w in winners.values() if w)),
                                       failed_txns=attempt.failed_transactions, stale_retries=attempt.stale_retries,
                                       retries=attempt.retries, committed=len(attempt.committed),
                                       claims=len(attempt.claims)))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("decision %s", kv(scheduler=self.name, job=attempt.job_id, outcome=attempt.outcome.value,
                                        claims=len(attempt.claims), committed=len(attempt.committed),
                                        decision_ms=1000.0 * attempt.decision_time_s, txns=attempt.transactions,
                                        retries=attempt.retries))
