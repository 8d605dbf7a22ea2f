"""Hollow machine agents against a real etcd: tasks start and end, machines fail, drain, repair."""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import replace

import pytest

from cellstate.check import check_cell
from cellstate.codec.records import decode_alloc, decode_job_record, decode_machine, encode_job_record, encode_machine
from cellstate.committer import StoreCommitter
from cellstate.etcd.store import EtcdStore
from cellstate.model import Job, JobKind, JobRecord, JobState, Machine, MachineState
from cellstate.resources import ZERO, Resources
from cellstate.store import Unavailable
from cellstate.submit import submit_jobs
from cellstate.plan import Claim, JobEntry, MachineEntry, Plan
from tools.agents.agent import Agent, AgentConfig
from tools.agents.lifecycle import MachineSelector
from tools.cli import main

CAPACITY = Resources.of(8_000, 16_384, 100_000)
REQUEST = Resources.of(500, 1_024, 10)
BATCH, SERVICE = JobKind.BATCH, JobKind.SERVICE


# ------------------------------------------------------------------------------ helpers


def add_machines(store, keys, *ids):
    for machine_id in ids:
        store.put(keys.machine(machine_id), encode_machine(Machine(machine_id, CAPACITY, zone="zone-a")))


def submit(store, keys, job_id, kind=BATCH, tasks=1, duration_s=None):
    submit_jobs(store, keys, [Job(job_id, kind, tasks, REQUEST, duration_s=duration_s)], time.time())


def place(store, keys, job_id, placements, placed_at=None):
    """Place tasks with the real placement commit (ledgers charged); ``placements``: [(task, machine)]."""
    job_kv = store.get(keys.job(job_id))
    machines = {}
    for _, machine_id in placements:
        kv = store.get(keys.machine(machine_id))
        machines[machine_id] = MachineEntry(decode_machine(kv.key, kv.value), kv.mod_revision)
    plan = Plan(JobEntry(decode_job_record(job_kv.key, job_kv.value), job_kv.mod_revision),
                tuple(Claim(task, machine_id, REQUEST) for task, machine_id in placements), machines,
                scheduler="test", now=time.time() if placed_at is None else placed_at)
    assert StoreCommitter(store, keys).commit(plan).committed


def record(store, keys, job_id) -> JobRecord:
    kv = store.get(keys.job(job_id))
    return decode_job_record(kv.key, kv.value)


def machine(store, keys, machine_id) -> Machine:
    kv = store.get(keys.machine(machine_id))
    return decode_machine(kv.key, kv.value)


def allocs(store, keys):
    return [decode_alloc(kv.key, kv.value) for kv in store.range(keys.kind_prefix("allocs")).kvs]


def steps_until(agent, done, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "agent did not get there in time"
        agent.step(max_wait=0.05)


def assert_clean(store, keys):
    report = check_cell(store, keys)
    assert report.ok, report.violations


@pytest.fixture
def make_agent(etcd_store, cell_keys):
    made = []

    def make(**config):
        agent = Agent(etcd_store, cell_keys, AgentConfig(**config))
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


# ------------------------------------------------------------------------ task lifecycle


def test_placed_batch_task_runs_and_ends(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1")
    submit(etcd_store, cell_keys, "j", duration_s=5.0)
    place(etcd_store, cell_keys, "j", [(0, "m1")], placed_at=time.time() - 10)  # already due: a restart
    agent = make_agent()
    agent.start()
    steps_until(agent, lambda: record(etcd_store, cell_keys, "j").state is JobState.FINISHED)
    assert allocs(etcd_store, cell_keys) == []
    m1 = machine(etcd_store, cell_keys, "m1")
    assert (m1.allocated, m1.task_count, m1.writer) == (ZERO, 0, "agent:agents")
    assert record(etcd_store, cell_keys, "j").tasks == "f"
    assert agent.metrics.value("omega_agent_tasks_finished_total") == 1
    assert_clean(etcd_store, cell_keys)


def test_a_restarted_agent_ends_tasks_at_placed_at_plus_duration(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1")
    submit(etcd_store, cell_keys, "j", duration_s=1.0)
    placed_at = time.time() - 0.5  # placed (and running) before this agents process started
    place(etcd_store, cell_keys, "j", [(0, "m1")], placed_at=placed_at)
    agent = make_agent()
    agent.start()
    steps_until(agent, lambda: record(etcd_store, cell_keys, "j").tasks == "f")
    assert placed_at + 1.0 <= time.time() < placed_at + 1.4


def test_placed_tasks_are_marked_running(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1", "m2")
    submit(etcd_store, cell_keys, "s", kind=SERVICE, tasks=3)
    place(etcd_store, cell_keys, "s", [(0, "m1"), (1, "m2")])
    agent = make_agent()
    agent.start()
    steps_until(agent, lambda: record(etcd_store, cell_keys, "s").tasks == "rrp")
    assert all(a.running for a in allocs(etcd_store, cell_keys))
    steps_until(agent, lambda: agent.metrics.value("omega_agent_running_tasks") == 2)
    assert agent.metrics.value("omega_agent_tasks_started_total") == 2
    assert_clean(etcd_store, cell_keys)


def test_only_selected_machines_are_simulated(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "a1", "b1")
    submit(etcd_store, cell_keys, "s", kind=SERVICE, tasks=2)
    place(etcd_store, cell_keys, "s", [(0, "a1"), (1, "b1")])
    agent = make_agent(machines=MachineSelector.parse("a"))
    agent.start()
    steps_until(agent, lambda: record(etcd_store, cell_keys, "s").tasks == "ra")
    agent.step(max_wait=0.1)
    assert record(etcd_store, cell_keys, "s").tasks == "ra"


def test_a_concurrent_job_change_is_retried_and_ends_correct(etcd_store, cell_keys):
    add_machines(etcd_store, cell_keys, "m1")
    submit(etcd_store, cell_keys, "j", tasks=2, duration_s=1.0)
    place(etcd_store, cell_keys, "j", [(0, "m1")], placed_at=time.time() - 10)

    class RacingStore:
        """The etcd store, with a scheduler's write to the job slipped in before the first txn."""

        def __init__(self, store):
            self._store, self.raced = store, False

        def __getattr__(self, name):
            return getattr(self._store, name)

        def txn(self, compares, success, failure=()):
            if not self.raced:
                self.raced = True
                current = record(self._store, cell_keys, "j")
                self._store.put(cell_keys.job("j"), encode_job_record(replace(current, reason="1 task: no fit")))
            return self._store.txn(compares, success, failure)

    racing = RacingStore(etcd_store)
    agent = Agent(racing, cell_keys)
    try:
        agent.start()
        steps_until(agent, lambda: record(etcd_store, cell_keys, "j").tasks == "fp")
    finally:
        agent.close()
    assert racing.raced and agent.metrics.value("omega_agent_txn_conflicts_total") >= 1
    assert record(etcd_store, cell_keys, "j").reason == "1 task: no fit"
    assert machine(etcd_store, cell_keys, "m1").task_count == 0
    assert_clean(etcd_store, cell_keys)


# ------------------------------------------------------------------------------ machines


@pytest.mark.parametrize("max_txn_ops", [10_000, 3], ids=["one-txn", "one-alloc-per-txn"])
def test_fail_a_machine_with_three_allocs(etcd_server, etcd_store, cell_keys, max_txn_ops):
    add_machines(etcd_store, cell_keys, "m1", "m2")
    submit(etcd_store, cell_keys, "j", tasks=3, duration_s=3600.0)
    submit(etcd_store, cell_keys, "s", kind=SERVICE, tasks=1)
    place(etcd_store, cell_keys, "j", [(0, "m1"), (1, "m1"), (2, "m2")])
    place(etcd_store, cell_keys, "s", [(0, "m1")])
    with EtcdStore(etcd_server.endpoints, max_txn_ops=max_txn_ops) as small:
        agent = Agent(small, cell_keys)
        agent.start()
        before = small.revision()
        assert agent.fail("m1") == 3
        assert small.revision() - before == (1 if max_txn_ops > 3 else 3)
        agent.close()
    m1 = machine(etcd_store, cell_keys, "m1")
    assert (m1.state, m1.allocated, m1.task_count) == (MachineState.DOWN, ZERO, 0)
    j, s = record(etcd_store, cell_keys, "j"), record(etcd_store, cell_keys, "s")
    assert (j.tasks[:2], s.tasks) == ("pp", "p")
    assert j.reason == s.reason == "machine m1 failed"
    assert [a.machine_id for a in allocs(etcd_store, cell_keys)] == ["m2"]
    assert agent.metrics.value("omega_agent_machine_failures_total") == 1
    assert_clean(etcd_store, cell_keys)


def test_drain_moves_services_and_lets_batch_tasks_end(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1")
    submit(etcd_store, cell_keys, "b", duration_s=20.0)
    submit(etcd_store, cell_keys, "s", kind=SERVICE, tasks=2)
    place(etcd_store, cell_keys, "b", [(0, "m1")])
    place(etcd_store, cell_keys, "s", [(0, "m1"), (1, "m1")])
    agent = make_agent(time_scale=100.0)  # 20 s of batch work end after 0.2 s
    agent.start()
    assert agent.drain("m1") == 2
    assert machine(etcd_store, cell_keys, "m1").state is MachineState.DRAINING
    s = record(etcd_store, cell_keys, "s")
    assert (s.tasks, s.reason) == ("pp", "machine m1 draining")
    assert record(etcd_store, cell_keys, "b").tasks in ("a", "r")
    assert_clean(etcd_store, cell_keys)
    steps_until(agent, lambda: record(etcd_store, cell_keys, "b").tasks == "f")
    m1 = machine(etcd_store, cell_keys, "m1")
    assert (m1.state, m1.task_count) == (MachineState.DRAINING, 0)
    assert_clean(etcd_store, cell_keys)


def test_random_failures_are_repaired(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1", "m2", "m3")
    submit(etcd_store, cell_keys, "s", kind=SERVICE, tasks=3)
    place(etcd_store, cell_keys, "s", [(0, "m1"), (1, "m2"), (2, "m3")])
    # 36 failures per machine-hour at 1000x: about 10 per second per machine; repaired after 0.05 s.
    agent = make_agent(fail_rate=36.0, repair_after=50.0, time_scale=1000.0, seed=7)
    agent.start()
    steps_until(agent, lambda: agent.metrics.value("omega_agent_machine_failures_total") >= 3)
    s = record(etcd_store, cell_keys, "s")
    assert s.tasks.count("p") >= 1 and s.reason.endswith("failed")
    assert_clean(etcd_store, cell_keys)
    agent.injector.rate_per_hour = 0.0  # no more failures: the pending repairs bring every machine back
    agent.injector.plan_next_failure(time.time(), 3)
    steps_until(agent, lambda: all(machine(etcd_store, cell_keys, m).state is MachineState.UP
                                   for m in ("m1", "m2", "m3")))
    assert "agent:agents" in {machine(etcd_store, cell_keys, m).writer for m in ("m1", "m2", "m3")}
    assert_clean(etcd_store, cell_keys)


# ------------------------------------------------------------------------- loop, CLI


def test_agent_loop_in_a_thread_finishes_work_within_bounded_time(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1", "m2", "m3")
    submit(etcd_store, cell_keys, "j", tasks=6, duration_s=30.0)
    agent = make_agent(time_scale=100.0)  # 30 s tasks take 0.3 s
    port = agent.metrics.serve(0)
    agent.start()
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        place(etcd_store, cell_keys, "j", [(i, f"m{1 + i % 3}") for i in range(6)])
        started = time.monotonic()
        while record(etcd_store, cell_keys, "j").state is not JobState.FINISHED:
            assert time.monotonic() - started < 5.0, record(etcd_store, cell_keys, "j")
            time.sleep(0.02)
        assert time.monotonic() - started >= 0.25  # durations are honoured, only scaled
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(agent.metrics.labels.items()))
        assert f"omega_agent_tasks_finished_total{{{labels}}} 6.0" in body and f'cell="{cell_keys.cell}"' in labels
    finally:
        stop.set()
        thread.join(timeout=5)
        agent.metrics.close()
    assert not thread.is_alive()
    assert allocs(etcd_store, cell_keys) == []
    assert_clean(etcd_store, cell_keys)


def test_agent_loop_lists_the_cell_again_after_a_store_error(etcd_store, cell_keys, make_agent):
    add_machines(etcd_store, cell_keys, "m1")
    submit(etcd_store, cell_keys, "j", duration_s=0.0)
    agent = make_agent()
    agent.start()
    pump, failed = agent.replica.pump, []

    def pump_once_broken(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise Unavailable("etcd went away (test)")
        return pump(*args, **kwargs)

    agent.replica.pump = pump_once_broken
    place(etcd_store, cell_keys, "j", [(0, "m1")])
    stop = threading.Event()
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 5.0
        while record(etcd_store, cell_keys, "j").tasks != "f":
            assert time.monotonic() < deadline, "the agent did not recover"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert failed and not thread.is_alive()
    assert_clean(etcd_store, cell_keys)


def _cli(etcd_server, cell_keys, *flags):
    return main(["agents", "run", "--endpoints", ",".join(etcd_server.endpoints), "--cell", cell_keys.cell,
                 "--max-txn-ops", "128", *flags])


def test_cli_registers_machines_fails_one_and_stops(etcd_server, etcd_store, cell_keys, capsys):
    assert _cli(etcd_server, cell_keys, "--init-machines", "3", "--fail", "m00001", "--run-for", "0.3") == 0
    assert machine(etcd_store, cell_keys, "m00001").state is MachineState.DOWN
    assert machine(etcd_store, cell_keys, "m00000").state is MachineState.UP
    out = capsys.readouterr().out
    assert "simulating 3 machines" in out and "agents stopped" in out


@pytest.mark.parametrize("flags, message", [
    (["--fail", "nope"], "no machine 'nope'"),
    (["--machines", " "], "--machines"),
    (["--time-scale", "0"], "time_scale must be > 0"),
    (["--machines", "x", "--drain", "m1"], "not among the --machines"),
], ids=["unknown-machine", "empty-selection", "zero-time-scale", "unselected-machine"])
def test_cli_bad_flags_exit_2_naming_the_problem(etcd_server, etcd_store, cell_keys, capsys, flags, message):
    add_machines(etcd_store, cell_keys, "m1")
    with pytest.raises(SystemExit) as exc:
        _cli(etcd_server, cell_keys, "--run-for", "0.1", *flags)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
