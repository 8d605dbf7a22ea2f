"""Shared pieces of the benchmarks: an embedded etcd of their own, timing, reporting."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Iterator

from cellstate.etcd.cluster import EtcdCluster
from cellstate.etcd.options import EtcdOptions
from cellstate.etcd.store import EtcdStore


@contextmanager
def own_etcd(no_fsync: bool) -> Iterator[EtcdCluster]:
    """A single-member etcd on a free loopback port (fsync on unless ``no_fsync``), stopped after."""
    cluster = EtcdCluster(1, options=EtcdOptions(unsafe_no_fsync=no_fsync)).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def store_of(cluster: EtcdCluster) -> EtcdStore:
    """An EtcdStore with the limits the embedded etcd was started with."""
    opts = cluster.options
    return EtcdStore(cluster.endpoints, max_txn_ops=opts.max_txn_ops, max_request_bytes=opts.max_request_bytes,
                     timeout=60.0)


def timed(fn) -> float:
    """Seconds one call of ``fn`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interpreter() -> str:
    """The running interpreter: path, implementation and version (a CPU-bound benchmark's
    result depends on how the interpreter was built, not only on the code)."""
    return (f"{os.path.realpath(sys.executable)} ({platform.python_implementation()} "
            f"{platform.python_version()})")


def median(values) -> float:
    return statistics.median(values)


def verdict(name: str, value: float, goal: float, unit: str, higher_is_better: bool) -> str:
    """One line: the figure, the goal and value/goal (>= 1.0 meets it)."""
    ratio = value / goal if higher_is_better else goal / value
    status = "meets" if ratio >= 1.0 else "MISSES"
    sign = ">=" if higher_is_better else "<"
    return f"{name}: {value:,.2f} {unit} (goal {sign} {goal:,} {unit}; ratio vs goal {ratio:.2f}, {status} it)"
