"""A timed GPU workload for replays (FGD under Omega): the gpu-frag experiment's arrival
sequence (``run.arrival_sequence``) submitted at a steady rate, each pod a one-task batch job
running for its own lifetime in the pod list (``deletion_time - scheduled_time``, else
``- creation_time``) times ``life_scale``; pods with no lifetime run to the end. Written as an
omega trace whose machines are the node list's (GPU devices, ``gpu_model`` label)."""

from __future__ import annotations

from datetime import UTC, datetime

from cellstate.model import Job, JobKind
from tools.gpufrag.experiment import shape_of_pod
from tools.gpufrag.run import arrival_sequence
from tools.trace.events import JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter
from tools.trace.openb.lists import read_nodes, read_pods


def write_burst_trace(nodes_path: str, pods_path: str, out: str, seed: int = 42, tune: float = 1.0,
                      rate: float = 20.0, life_scale: float = 0.01, node_limit: int | None = None) -> dict:
    """Write the trace (see the module docstring); what it holds. ``node_limit``: a seeded
    sample of that many nodes (in list order) instead of all; the demand scales with it."""
    if rate <= 0 or life_scale < 0 or not 0 < tune <= 5:
        raise ValueError(f"rate must be > 0, life_scale >= 0 and tune in (0, 5], got {rate}, {life_scale}, {tune}")
    nodes, _ = read_nodes(nodes_path)
    if node_limit is not None and node_limit < len(nodes):
        import random

        keep = set(random.Random(seed).sample(range(len(nodes)), node_limit))
        nodes = [n for i, n in enumerate(nodes) if i in keep]
    pods, _ = read_pods(pods_path)
    shapes = [shape_of_pod(p) for p in pods]
    capacity = sum(n.gpus for n in nodes) * 1000
    order = arrival_sequence(shapes, capacity, tune, seed)
    header = TraceHeader(
        source=f"gpu burst of {pods_path} on {nodes_path}", created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        capacity_model=f"openb nodes as listed ({len(nodes)}, {capacity // 1000} GPUs)",
        cell="gpu-burst",
        notes=f"seed {seed}, tune {tune}: the gpu-frag arrival sequence, {rate} pods/s, each running its own "
              f"lifetime x {life_scale} (0: no departures)")
    lives = 0
    with TraceWriter(out, header, atomic=True) as writer:
        for n in nodes:
            writer.write(MachineAdd(0.0, n.machine()))
        for i, index in enumerate(order):
            p = pods[index]
            start = p.scheduled if p.scheduled is not None else p.created
            life = ((p.deleted - start) * life_scale if life_scale > 0 and p.deleted is not None and start is not None
                    else None)
            lives += life is not None
            job = Job(f"{p.name}-{i}", JobKind.BATCH, 1, p.request(), constraints=p.constraints(), duration_s=life)
            writer.write(JobSubmit(i / rate, job))
    return {"pods": len(order), "with_lifetime": lives, "gpu_capacity_milli": capacity,
            "arrival_window_s": len(order) / rate}
