"""A batch scheduler process for test_chaos_gang_kill.py: ``omega scheduler run`` as
tools/cli/scheduler.py wires it (etcd's default limits: 128 ops per txn), except that its gang
reservations pause before chunk ``PAUSE_AT``: it writes ``MARKER`` (the chunks reserved so far)
and waits there, keeping its lease alive, until it is killed. Deterministic: the test kills it
between two chunks without racing a sleep.

    python gang_pause_scheduler.py ENDPOINTS CELL NAME MARKER PAUSE_AT
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from cellstate.committer import StoreCommitter
from cellstate.etcd.store import EtcdStore
from cellstate.keys import CellKeys
from cellstate.replica.view import ReplicaView
from cellstate.stats_sink import LeasedStatsSink
from cellstate.store import StoreError
from omega.runtime import RuntimeOptions, SchedulerProcess
from schedulers.chains import make_scheduler, retry_policy_for


class PausedGangs:
    """The committer's gangs, pausing before chunk ``pause_at`` (see the module docstring)."""

    def __init__(self, inner, marker: Path, pause_at: int):
        self.inner = inner
        self.max_claims_per_txn = inner.max_claims_per_txn
        self.marker = marker
        self.pause_at = pause_at
        self.chunks = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def reserve(self, hold, plan):
        self.chunks += 1
        if self.chunks == self.pause_at:
            self.marker.write_text(f"{self.chunks - 1} {hold.reserved}\n")
            while True:  # until SIGKILL; the reservation stays alive meanwhile
                self.inner.keep_alive(hold)
                time.sleep(0.5)
        return self.inner.reserve(hold, plan)


def main(endpoints: str, cell: str, name: str, marker: str, pause_at: str) -> None:
    store = EtcdStore(endpoints.split(","))
    keys = CellKeys(cell)
    committer = StoreCommitter(store, keys)
    committer.gangs = PausedGangs(committer.gangs, Path(marker), int(pause_at))
    process = SchedulerProcess(make_scheduler("batch", name, 0), ReplicaView(store, keys), committer,
                               LeasedStatsSink(store, keys, name), retry=retry_policy_for("batch"),
                               options=RuntimeOptions(transient_errors=(StoreError,)))
    print(f"scheduler {name} serving", flush=True)
    anyio.run(process.run)


if __name__ == "__main__":
    main(*sys.argv[1:])
