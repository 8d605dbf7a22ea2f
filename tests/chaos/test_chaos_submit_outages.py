"""Chaos: ``omega generate --submit`` keeps submitting through etcd outages and loses no arrival.

The generator runs as a real ``omega`` process while (1) the single etcd member is SIGKILLed and
later SIGTERMed, each time restarted on its data after a few seconds, and (2) the leader of a
3-member etcd is SIGKILLed. Each submission retries through the outage (``--retry-for``); the
arrivals due meanwhile go in together once etcd answers. Afterwards every generated job is in
etcd exactly once (its key written once: version 1) with its generated spec, and the process
exited 0 having counted them all.
"""

from __future__ import annotations

import time

import etcd3
import pytest

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.store import parse_endpoint
from cellstate.jobspec import load_jobs
from chaos_helpers import OmegaProc, chaos_cell, job_records, own_etcd, store_on, wait_for

pytestmark = pytest.mark.slow

SEED, RATE, DURATION_S = 31, 20, 12  # 240 arrivals over 12 s: a submission every ~50 ms
DOWN_S = 3.0


def _generated(tmp_path, prefix: str) -> list:
    """The jobs `omega generate` makes with these flags (written with --out, read back)."""
    out = tmp_path / f"{prefix}jobs.json"
    proc = OmegaProc("generate-out", _flags(prefix) + ["--out", str(out)], tmp_path, "wrote")
    proc.start()
    assert proc.proc.wait(60) == 0, proc.tail()
    return load_jobs(out)


def _flags(prefix: str) -> list[str]:
    return ["generate", "--seed", str(SEED), "--rate", str(RATE), "--duration", str(DURATION_S),
            "--prefix", prefix]


def _submitter(tmp_path, prefix: str, endpoints: list[str], cell: str) -> OmegaProc:
    argv = _flags(prefix) + ["--submit", "--retry-for", "60", "--endpoints", ",".join(endpoints), "--cell", cell]
    proc = OmegaProc("generate", argv, tmp_path, "submitted")
    proc.start()
    return proc


def _stored(store, keys) -> int:
    try:
        return len(store.range(keys.kind_prefix("jobs")).kvs)
    except Exception:  # an outage: not yet
        return 0


def _assert_each_job_once(store, keys, jobs, proc: OmegaProc) -> None:
    status = proc.proc.wait(120)
    assert status == 0, proc.tail(30)
    out = proc.output()
    assert f"submitted {len(jobs)} job(s)" in out, proc.tail(30)
    assert "already exist" not in out and "skipped" not in out, proc.tail(30)
    kvs = store.range(keys.kind_prefix("jobs")).kvs
    assert sorted(kv.key for kv in kvs) == sorted(keys.job(job.id) for job in jobs), "jobs lost or added"
    assert all(kv.version == 1 for kv in kvs), "a job record was written more than once"
    records = job_records(store, keys)
    changed = [job.id for job in jobs if records[job.id].job != job]
    assert not changed, f"stored specs differ from the generated ones: {changed[:5]}"


def test_generate_submit_rides_out_etcd_restarts(cell_keys, tmp_path):
    prefix = "rs-"
    jobs = _generated(tmp_path, prefix)
    assert len(jobs) > 100
    cluster = own_etcd()
    store = store_on(cluster)
    chaos_cell(store, cell_keys, machines=4)  # the cell exists: submitting into an unknown cell is refused
    proc = None
    try:
        proc = _submitter(tmp_path, prefix, cluster.endpoints, cell_keys.cell)
        for how, after in (("kill", 20), ("stop", 80)):
            wait_for(lambda: _stored(store, cell_keys) >= after, 40, f"{after} jobs submitted")
            member = cluster.members[0]
            member.kill() if how == "kill" else member.stop()
            time.sleep(DOWN_S)  # arrivals keep coming due while etcd is down
            cluster.restart_member(0)
        _assert_each_job_once(store, cell_keys, jobs, proc)
        retries = proc.output().count("; retry ")
        assert retries >= 2, f"the outages caused no retry:\n{proc.tail(30)}"
        print(f"{len(jobs)} jobs submitted once each through 2 outages ({retries} retries)")
    finally:
        if proc is not None and proc.alive():
            proc.kill()
        store.close()
        cluster.stop()


def _leader_index(cluster: EtcdCluster) -> int:
    """The index of the member that is the raft leader (asked of each member itself)."""
    def leader() -> tuple[int] | None:
        for index, member in enumerate(cluster.members):
            host, port = parse_endpoint(member.endpoint)
            client = etcd3.client(host=host, port=port, timeout=2)
            try:
                status = client.maintenancestub.Status(etcd3.etcdrpc.StatusRequest(), 2)
            except Exception:  # down, or an election under way: ask the next one
                continue
            finally:
                client.close()
            if status.leader and status.leader == status.header.member_id:
                return (index,)
        return None

    return wait_for(leader, 20, "a raft leader")[0]


def test_generate_submit_survives_losing_the_leader(cell_keys, tmp_path):
    prefix = "ld-"
    jobs = _generated(tmp_path, prefix)
    cluster = own_etcd(3)
    store = store_on(cluster)
    chaos_cell(store, cell_keys, machines=4)  # the cell exists: submitting into an unknown cell is refused
    proc = None
    try:
        leader = _leader_index(cluster)
        # The submitter talks to the leader first, so the kill breaks its connection as well
        # as forcing an election.
        endpoints = [cluster.endpoints[leader]] + [e for i, e in enumerate(cluster.endpoints) if i != leader]
        proc = _submitter(tmp_path, prefix, endpoints, cell_keys.cell)
        wait_for(lambda: _stored(store, cell_keys) >= 30, 40, "30 jobs submitted")
        leader = _leader_index(cluster)  # (the same one, unless an election happened meanwhile)
        cluster.members[leader].kill()
        done = _stored(store, cell_keys)
        wait_for(lambda: _stored(store, cell_keys) >= done + 30, 40, "submissions going on after the leader died")
        cluster.restart_member(leader)
        _assert_each_job_once(store, cell_keys, jobs, proc)
        print(f"{len(jobs)} jobs submitted once each; leader {leader} killed; "
              f"{proc.output().count('; retry ')} retries")
    finally:
        if proc is not None and proc.alive():
            proc.kill()
        store.close()
        cluster.stop()
