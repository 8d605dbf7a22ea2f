"""The supervisor of an embedded etcd cluster: a thread restarting a member that exits on its own (a
crash, a SIGKILL) on its ports and data directory, at a bounded rate (``RestartPolicy``), while the
others keep serving."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from cellstate.etcd.binary import EtcdError

if TYPE_CHECKING:
    from cellstate.etcd.cluster import EtcdCluster
    from cellstate.etcd.member import EtcdMember

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestartPolicy:
    """How often the supervisor restarts a member: restart ``k`` within ``window_s`` waits
    ``backoff_s * 2**k`` (at most ``max_backoff_s``); past ``max_restarts`` in the window the
    member is left down."""

    max_restarts: int = 5
    window_s: float = 120.0
    backoff_s: float = 0.5
    max_backoff_s: float = 15.0


class Supervisor:
    """A thread restarting members that exit on their own, each on its ports and data dir.

    Every action is reported through ``report`` (default: this module's logger). A member that
    keeps exiting is left down after ``policy.max_restarts`` restarts within ``policy.window_s``;
    ``quorum_lost`` is then true once too many members are left down for the cluster to serve.
    """

    def __init__(self, cluster: EtcdCluster, policy: RestartPolicy, report: Callable[[str], None] | None = None,
                 interval: float = 0.5):
        self.cluster = cluster
        self.policy = policy
        self.report = report or log.warning
        self.interval = interval
        self.restarts = {m.spec.name: 0 for m in cluster.members}   # total restarts per member
        self.given_up: set[str] = set()
        self._recent = {m.spec.name: deque() for m in cluster.members}  # restart times within the window
        self._due: dict[str, float] = {}        # member -> when to restart it
        self._awaiting: set[str] = set()        # restarted, not yet healthy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="etcd-supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def quorum_lost(self) -> bool:
        size = len(self.cluster.members)
        return len(self.given_up) > size - (size // 2 + 1)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check(time.monotonic())
            except Exception as exc:  # never let the supervisor die silently
                self.report(f"supervisor error: {exc!r}")

    def check(self, now: float) -> None:
        """One pass over the members (the thread calls this every ``interval``)."""
        for member in self.cluster.members:
            name = member.spec.name
            if name in self.given_up or self._stop.is_set():
                continue
            if member.exited:
                self._handle_exit(member, now)
            elif name in self._awaiting and member.running and member.healthy():
                self._awaiting.discard(name)
                self.report(f"member {name} healthy again (pid {member.pid})")

    def _handle_exit(self, member: EtcdMember, now: float) -> None:
        name, policy = member.spec.name, self.policy
        recent = self._recent[name]
        while recent and now - recent[0] > policy.window_s:
            recent.popleft()
        if name not in self._due:
            self._awaiting.discard(name)
            if len(recent) >= policy.max_restarts:
                self.given_up.add(name)
                self.report(f"member {name} exited (status {member.process.returncode}) after {len(recent)} "
                            f"restarts within {policy.window_s:g} s; leaving it down\n{member.log_tail(5)}")
                return
            delay = min(policy.backoff_s * 2 ** len(recent), policy.max_backoff_s)
            self._due[name] = now + delay
            self.report(f"member {name} (pid {member.pid}) exited with status {member.process.returncode}; "
                        f"restarting it in {delay:g} s")
            return
        if now < self._due[name]:
            return
        del self._due[name]
        recent.append(now)
        self.restarts[name] += 1
        try:
            member.launch()  # on failure the exited process stays: retried with backoff, then given up
        except (EtcdError, OSError) as exc:
            self.report(f"member {name} could not be restarted: {exc}")
            return
        self._awaiting.add(name)
        self.report(f"member {name} restarted (pid {member.pid}, restart {len(recent)} within "
                    f"{policy.window_s:g} s)")
