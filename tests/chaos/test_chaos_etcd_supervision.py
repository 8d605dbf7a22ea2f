"""Chaos: ``omega etcd up --members 3 --data-dir D`` keeps serving when a member dies, and
restarts on its data dir.

The test starts ``omega etcd up`` and SIGKILLs members by the PIDs it prints (one at a time,
the first one being the member the client talks to) while writing keys one after the other:
every write must go through (each within a generous deadline), the supervisor must restart the
member on its data dir, and the member must then serve every key written, including those written
while it was down. Then ``omega etcd up`` is stopped (exit 0, all members gone) and started again on
the same data dir: same endpoints, every key still there.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from cellstate.etcd.store import EtcdStore
from chaos_helpers import OmegaProc, retrying

pytestmark = pytest.mark.slow

KILLED = ("m0", "m2")
WRITES_WHILE_BACK = 30  # writes that must succeed after each kill, besides the member coming back


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:g} s"
        time.sleep(0.1)


def members(up: OmegaProc) -> dict[str, tuple[int, str]]:
    """name -> (pid, client host:port) of the current incarnation, as printed by ``etcd up``."""
    text = up._log("out").read_text(errors="replace")
    return {name: (int(pid), endpoint)
            for name, pid, endpoint in re.findall(r"member (m\d) pid (\d+) client https?://(\S+) ", text)}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_if_ours(pid: int, marker: str) -> None:
    """SIGKILL ``pid`` if it is still an etcd member whose command line holds ``marker`` (cleanup only)."""
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            ours = marker in f.read()
        if ours:
            os.kill(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


class Writer:
    """Writes /chaos/k{i} = i one after the other; each write must succeed within 15 s."""

    def __init__(self, store: EtcdStore):
        self.store = store
        self.written = 0

    def write(self, count: int = 1) -> None:
        for _ in range(count):
            i = self.written
            retrying(lambda: self.store.put(f"/chaos/k{i:05d}", str(i).encode()), time.monotonic() + 15,
                     f"write {i}")
            self.written += 1

    def write_until(self, condition, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{what} not reached within {timeout:g} s"
            self.write()


def all_keys_on(endpoint: str, count: int) -> bool:
    """True when the member at ``endpoint`` alone serves the first ``count`` keys written, unchanged."""
    try:
        with EtcdStore([endpoint], timeout=2.0) as store:
            kvs = store.range("/chaos/k").kvs
    except Exception:
        return False
    return {kv.key: kv.value for kv in kvs} == {f"/chaos/k{i:05d}": str(i).encode() for i in range(count)}


def test_members_die_writes_go_on_and_the_cluster_restarts_on_its_data(tmp_path):
    data = tmp_path / "etcd"
    up = OmegaProc("etcd", ["etcd", "up", "--members", "3", "--data-dir", str(data), "--no-fsync", "--port", "0"],
                   tmp_path, "etcd up;")
    started: dict[str, tuple[int, str]] = {}
    store = None
    try:
        up.start()
        wait_for(lambda: up.ready() and len(members(up)) == 3, 60, "etcd up")
        started = members(up)
        endpoints = [started[name][1] for name in ("m0", "m1", "m2")]
        store = EtcdStore(endpoints, timeout=2.0)
        writer = Writer(store)
        writer.write(20)
        for restarts, name in enumerate(KILLED, 1):
            pid = started[name][0]
            os.kill(pid, signal.SIGKILL)  # a member of the cluster our `omega etcd up` started
            at_kill = writer.written
            writer.write_until(lambda: f"member {name} healthy again" in up.output(), 60,
                               f"{name} restarted and healthy")
            writer.write(WRITES_WHILE_BACK)
            assert up.alive(), up.tail()
            assert f"member {name} (pid {pid}) exited with status -9" in up.output()
            assert f"member {name} restarted (pid" in up.output() and up.output().count("restarted (pid") == restarts
            assert writer.written >= at_kill + WRITES_WHILE_BACK
            wait_for(lambda: all_keys_on(started[name][1], writer.written), 30,
                     f"the restarted {name} serving every key")
        store.close()
        store = None
        assert up.stop() == 0
        wait_for(lambda: not any(alive(pid) for pid, _ in members(up).values()), 30, "members gone")
        assert "etcd stopped" in up.output()

        up.start()  # the same command on the same data dir: same ports, same data
        wait_for(lambda: up.ready() and len(members(up)) == 3, 60, "etcd up again")
        again = members(up)
        assert [again[n][1] for n in ("m0", "m1", "m2")] == endpoints
        for name in ("m0", "m1", "m2"):
            wait_for(lambda: all_keys_on(again[name][1], writer.written), 30, f"{name} serving every key")
        with EtcdStore(endpoints, timeout=2.0) as after:
            after.put("/chaos/after-restart", b"ok")
            assert after.get("/chaos/after-restart").value == b"ok"
        assert up.stop() == 0
        print(f"{writer.written} writes through {len(KILLED)} member kills; restarted on {data}")
    finally:
        if store is not None:
            store.close()
        if up.alive():
            up.stop()
        for pid, _ in list(started.values()) + list(members(up).values() if up.starts else []):
            kill_if_ours(pid, str(data))


def test_a_member_left_down_leaves_two_serving_and_a_lost_quorum_stops_the_cluster(tmp_path):
    """With ``--max-restarts 0`` a dead member stays down: the other two keep serving writes; when
    a second one dies the quorum is lost and ``omega etcd up`` stops the last member and exits 1."""
    up = OmegaProc("etcd0", ["etcd", "up", "--members", "3", "--max-restarts", "0", "--no-fsync", "--port", "0"],
                   tmp_path, "etcd up;")
    started: dict[str, tuple[int, str]] = {}
    try:
        up.start()
        wait_for(lambda: up.ready() and len(members(up)) == 3, 60, "etcd up")
        started = members(up)
        with EtcdStore([started[n][1] for n in ("m0", "m1", "m2")], timeout=2.0) as store:
            writer = Writer(store)
            writer.write(10)
            os.kill(started["m1"][0], signal.SIGKILL)
            wait_for(lambda: "member m1 exited" in up.output(), 30, "m1 left down")
            assert "leaving it down" in up.output()
            writer.write(WRITES_WHILE_BACK)  # m0 and m2 are a quorum
            assert up.alive() and not alive(started["m1"][0])
            os.kill(started["m2"][0], signal.SIGKILL)
            wait_for(lambda: not up.alive(), 30, "etcd up exiting")
        assert up.proc.returncode == 1
        assert "quorum lost (left down: m1, m2)" in up.output() and "etcd stopped" in up.output()
        assert not alive(started["m0"][0])
    finally:
        if up.alive():
            up.stop()
        for pid, _ in started.values():
            kill_if_ours(pid, "omega-etcd-")
