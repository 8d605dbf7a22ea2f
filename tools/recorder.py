"""``Recorder``: watch a live cell and write what happens to it as an ``omega-trace`` file.

The recorder lists the cell's machines and jobs at one revision R (the initial state, all at
``t = 0``), then watches the cell from R + 1 and turns each change into trace events, with
``t`` = seconds since the listing (monotonic clock):

- initial state: ``machine_add`` for each machine (its ledger zeroed), ``job_submit`` for each
  job, then ``task_placed`` for each allocation at R (format version 2), so a replay with
  ``initial_state="recorded"`` starts from the same placements (``"scheduled"`` places them
  again). Tasks already ended at R are submitted again as pending (a trace has no "already
  ended" event); a job already killed at R is followed by its ``job_kill`` at ``t = 0``;
- a new machine key → ``machine_add``; a machine whose state becomes ``down`` →
  ``machine_fail``; one back ``up`` from ``down`` (a repair) → ``machine_add`` again (ledger
  zeroed: a replay's cell brings the failed machine back up); a deleted machine key →
  ``machine_remove``;
- a new job key → ``job_submit`` (its full spec); a task whose state character becomes ``f``
  → ``task_end finished``, ``x`` → ``task_end failed`` (diffed against the previous version of
  the record the recorder keeps); a job whose ``killed`` flag is set → ``job_kill``.

Not recorded (no trace event for them): a machine draining (or up again after draining), placements
made after the listing (a replay makes its own), deleted job keys. A value that does not decode, or whose
id is not its key's (``machines/m1`` holding machine m2's value), is quarantined, never fatal: counted
in ``bad_values``, logged once per key (until a good value comes) and ignored (the previous
version, if any, stays the reference for the next diff).

After a broken watch the recorder resumes from the last revision it applied + 1 (giving up
after ``give_up_after`` seconds of outage); after compaction it lists the cell again and
diffs the listing against what it holds (deletions included).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Callable

from tenacity import Retrying, retry_if_exception_type, wait_fixed

from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine
from cellstate.codec.fields import CodecError
from cellstate.keys import CellKeys
from cellstate.model import JobRecord, Machine, MachineState
from cellstate.resources import ZERO
from cellstate.store import Compacted, EventKind, KeyValue, Store, Unavailable, WatchStream
from tools.trace.events import (
    JobKill, JobSubmit, MachineAdd, MachineFail, MachineRemove, TaskEnd, TaskEndStatus, TaskPlaced, TraceEvent,
)
from tools.trace.format import TraceHeader, TraceWriter

log = logging.getLogger(__name__)

DEFAULT_GIVE_UP_AFTER = 30.0
_POLL_S = 0.2
_RETRY_S = 0.2
_ENDINGS = {"f": TaskEndStatus.FINISHED, "x": TaskEndStatus.FAILED}


def recording_header(keys: CellKeys, source: str) -> TraceHeader:
    """The header of a recording of the cell ``keys`` (``source`` names where it came from)."""
    return TraceHeader(
        source=f"omega record of cell {keys.cell!r} (root {keys.root}) from {source}",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        capacity_model="recorded: machine capacities and attributes as stored in the cell",
        cell=keys.cell,
        notes="t = seconds since the initial listing (monotonic); t = 0: the cell's machines (ledgers "
              "zeroed), jobs and placements (task_placed) at the listing revision; tasks already ended "
              "there are submitted again as pending, jobs already killed are killed at t = 0")


@dataclass
class RecordStats:
    """What a recording saw: events by type, values that did not decode, watch resumes."""

    start_revision: int = 0
    revision: int = 0
    events: dict[str, int] = field(default_factory=dict)
    bad_values: int = 0
    resumes: int = 0
    relists: int = 0


class Recorder:
    """Records the cell ``keys`` of ``store`` into ``writer`` (see the module docstring).

    ``start()`` lists the cell and writes the initial state; ``run(stop, duration)`` records
    until ``stop`` is set or ``duration`` seconds have passed, then returns (the caller
    closes the writer, which writes the end record). Store failures beyond
    ``give_up_after`` seconds of outage propagate as ``Unavailable``.
    """

    def __init__(self, store: Store, keys: CellKeys, writer: TraceWriter, *,
                 clock: Callable[[], float] = time.monotonic, give_up_after: float = DEFAULT_GIVE_UP_AFTER):
        self.store, self.keys, self.writer = store, keys, writer
        self.clock = clock
        self.give_up_after = give_up_after
        self.stats = RecordStats()
        self._machines: dict[str, Machine] = {}
        self._jobs: dict[str, JobRecord] = {}
        self._stream: WatchStream | None = None
        self._bad: set[str] = set()  # keys whose last value was refused (logged once)
        self._started = 0.0
        self._now = 0.0

    # -- listing -----------------------------------------------------------------------------

    def start(self) -> int:
        """List the cell, write its initial state at t = 0, open the watch; returns R."""
        if self._stream is not None:
            raise RuntimeError("Recorder.start() called twice")
        revision, kvs = self._list()
        self._started = self.clock()
        self._now = 0.0
        for kv in kvs:
            self._initial(kv)
        self._initial_placements(revision)
        self.stats.start_revision = self.stats.revision = revision
        self._stream = self.store.watch(self.keys.prefix, revision + 1)
        return revision

    def _list(self) -> tuple[int, list[KeyValue]]:
        """Machines and jobs at one revision (allocs and stats are not read)."""
        machines = self.store.range(self.keys.kind_prefix("machines"))
        jobs = self.store.range(self.keys.kind_prefix("jobs"), machines.revision)
        return machines.revision, list(machines.kvs) + list(jobs.kvs)

    def _initial(self, kv: KeyValue) -> None:
        kind, ident = self._parse(kv.key)
        if kind == "machines":
            machine = self._decode(kv.key, decode_machine, kv.value, ident)
            if machine is not None:
                self._machines[ident] = machine
                self._emit(MachineAdd(0.0, _unloaded(machine)))
        elif kind == "jobs":
            record = self._decode(kv.key, decode_job_record, kv.value, ident)
            if record is not None:
                self._jobs[ident] = record
                self._emit(JobSubmit(0.0, record.job))
                if record.killed:
                    self._emit(JobKill(0.0, ident))

    def _initial_placements(self, revision: int) -> None:
        """``task_placed`` at t = 0 for each allocation at ``revision`` of a listed job and machine."""
        prefix = len(self.keys.kind_prefix("allocs"))
        for kv in self.store.range(self.keys.kind_prefix("allocs"), revision).kvs:
            alloc = self._decode(kv.key, decode_alloc, kv.value, kv.key[prefix:])
            if alloc is not None and alloc.job_id in self._jobs and alloc.machine_id in self._machines:
                self._emit(TaskPlaced(0.0, alloc.job_id, alloc.task_index, alloc.machine_id))

    # -- watching ----------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, duration: float | None = None) -> RecordStats:
        """Record until ``stop`` is set or ``duration`` seconds after ``start()``."""
        if self._stream is None:
            raise RuntimeError("Recorder.run() before start()")
        stop = stop or threading.Event()
        deadline = None if duration is None else self._started + duration
        while not stop.is_set():
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - self.clock())
            if wait <= 0:
                break
            self.step(wait)
        return self.stats

    def step(self, timeout: float) -> int:
        """Apply the next watch batch (waiting up to ``timeout`` s); returns events written."""
        before = self.writer.events
        try:
            batch = self._stream.next(timeout)
        except Unavailable:
            self._resume()
            return 0
        except Compacted:
            self._relist()
            return self.writer.events - before
        if batch is None:
            return 0
        self._now = self._elapsed()
        for ev in batch.events:
            if ev.kind is EventKind.PUT:
                self._on_put(ev.key, ev.value)
            else:
                self._on_delete(ev.key)
        self.stats.revision = max(self.stats.revision, batch.revision)
        return self.writer.events - before

    def close(self) -> None:
        """Stop watching (the writer is the caller's)."""
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    def _resume(self) -> None:
        """Reopen the watch from the last applied revision + 1, retrying until it works or the
        outage has lasted ``give_up_after`` seconds (then the last Unavailable propagates)."""
        since = self.clock()
        Retrying(retry=retry_if_exception_type(Unavailable), wait=wait_fixed(_RETRY_S), reraise=True,
                 stop=lambda _: self.clock() - since >= self.give_up_after)(self._reopen)
        self.stats.resumes += 1

    def _reopen(self) -> None:
        """Cancel the stream and watch again from revision + 1 (None while the store is down)."""
        self.close()
        self.store.revision()  # a dead server shows here at once, not later in the stream
        self._stream = self.store.watch(self.keys.prefix, self.stats.revision + 1)

    def _relist(self) -> None:
        """After compaction: list again, diff it against the held state, watch from there."""
        revision, kvs = self._list()
        self._now = self._elapsed()
        self.stats.relists += 1
        listed = {kv.key for kv in kvs}
        held = [self.keys.machine(i) for i in self._machines] + [self.keys.job(i) for i in self._jobs]
        for key in held:
            if key not in listed:
                self._on_delete(key)
        for kv in kvs:
            self._on_put(kv.key, kv.value)
        self.stats.revision = revision
        self._stream = self.store.watch(self.keys.prefix, revision + 1)

    # -- changes -> events -------------------------------------------------------------------

    def _on_put(self, key: str, raw: bytes) -> None:
        kind, ident = self._parse(key)
        if kind == "machines":
            machine = self._decode(key, decode_machine, raw, ident)
            if machine is not None:
                self._machine_changed(self._machines.get(ident), machine)
                self._machines[ident] = machine
        elif kind == "jobs":
            record = self._decode(key, decode_job_record, raw, ident)
            if record is not None:
                self._job_changed(self._jobs.get(ident), record)
                self._jobs[ident] = record

    def _on_delete(self, key: str) -> None:
        self._bad.discard(key)
        kind, ident = self._parse(key)
        if kind == "machines" and self._machines.pop(ident, None) is not None:
            self._emit(MachineRemove(self._now, ident))
        elif kind == "jobs":
            self._jobs.pop(ident, None)

    def _machine_changed(self, old: Machine | None, new: Machine) -> None:
        if old is None:
            self._emit(MachineAdd(self._now, _unloaded(new)))
        elif new.state is MachineState.DOWN and old.state is not MachineState.DOWN:
            self._emit(MachineFail(self._now, new.id))
        elif new.state is MachineState.UP and old.state is MachineState.DOWN:
            self._emit(MachineAdd(self._now, _unloaded(new)))  # a repair: a replay brings it back up

    def _job_changed(self, old: JobRecord | None, new: JobRecord) -> None:
        if old is None:
            self._emit(JobSubmit(self._now, new.job))
            if new.killed:
                self._emit(JobKill(self._now, new.id))
            return
        previous = old.tasks if len(old.tasks) == len(new.tasks) else "p" * len(new.tasks)
        for index, (was, now) in enumerate(zip(previous, new.tasks)):
            if now != was and now in _ENDINGS:
                self._emit(TaskEnd(self._now, new.id, index, _ENDINGS[now]))
        if new.killed and not old.killed:
            self._emit(JobKill(self._now, new.id))

    # -- helpers -----------------------------------------------------------------------------

    def _emit(self, event: TraceEvent) -> None:
        self.writer.write(event)
        name = type(event).__name__
        self.stats.events[name] = self.stats.events.get(name, 0) + 1

    def _elapsed(self) -> float:
        return max(self._now, self.clock() - self._started)

    def _parse(self, key: str) -> tuple[str, str]:
        """(kind, id) of a key of the cell; ("", "") for keys the recorder ignores."""
        try:
            kind, parts = self.keys.parse(key)
        except ValueError:
            return "", ""
        return (kind, parts[0]) if len(parts) == 1 else ("", "")

    def _decode(self, key: str, decode, raw: bytes, ident: str):
        """The value of ``key`` decoded, or None (counted, logged once per key) when it does not
        decode or its id is not ``ident`` (a machine's or job's id, an alloc's "job/task")."""
        try:
            value = decode(key, raw)
        except CodecError as exc:
            return self._refuse(key, str(exc))
        found = f"{value.job_id}/{value.task_index}" if decode is decode_alloc else value.id
        if found != ident:
            return self._refuse(key, f"holds the value of {found!r}")
        if self._bad:
            self._bad.discard(key)
        return value

    def _refuse(self, key: str, why: str) -> None:
        self.stats.bad_values += 1
        if key not in self._bad:
            self._bad.add(key)
            log.warning("recorder: quarantined %s (does not decode or names another id), ignored: %s", key, why)
        return None


def _unloaded(machine: Machine) -> Machine:
    """The machine as a replay should add it: nothing allocated on it, no last writer."""
    return replace(machine, allocated=ZERO, task_count=0, writer="")


def record(store: Store, keys: CellKeys, out, source: str, stop: threading.Event | None = None,
           duration: float | None = None, **options) -> RecordStats:
    """Record the cell into the trace file ``out`` until ``stop``/``duration``; the file gets its
    end record even when the store fails later (the failure then propagates). The store is
    probed first, so an unreachable store leaves no file behind."""
    store.revision()
    with TraceWriter(out, recording_header(keys, source)) as writer:
        recorder = Recorder(store, keys, writer, **options)
        try:
            recorder.start()
            recorder.run(stop, duration)
        finally:
            recorder.close()
            writer.close()
    return recorder.stats
