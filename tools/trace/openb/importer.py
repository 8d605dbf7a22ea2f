"""Import an openb node list and pod list (Alibaba cluster-trace-gpu-v2023) into an omega trace.

Machines: one per node at t = 0: ``cpu_milli``, ``memory_mib`` and ``gpu`` devices of 1000 milli
(``cellstate.devices``), the model as the label ``gpu_model``. Jobs: one per pod, one task,
submitted at its ``creation_time`` (trace time = creation time - the earliest one), asking its
CPU, memory and GPU (``num_gpu`` whole devices, or a ``gpu_milli`` share of one), its
``gpu_spec`` as a ``gpu_model in [...]`` constraint; killed at its ``deletion_time`` (a pod runs
until it is deleted). QoS gives the kind, the priority and the owner (the QoS class): ``LS`` and ``Guaranteed`` are service
jobs of priority 9, ``Burstable`` batch of priority 5, ``BE`` (best effort) batch of priority 0.

Ground truth (per task): each pod's ``scheduled_time - creation_time``; a pod the real cell never
scheduled (no ``scheduled_time``: phase Pending) has no delay ("never"), so a replay that places
it counts it apart (``replay_only``). Occupancy: the CPU and memory of the pods the real cell ran,
from scheduled to deleted. Pods without a ``creation_time`` cannot be placed in time: skipped and
counted; a list with no ``creation_time`` column at all is refused (``omega experiment gpu-frag``
is the untimed experiment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime

from cellstate.model import Job, JobKind, Machine
from tools.trace.events import JobKill, JobSubmit, MachineAdd
from tools.trace.format import TraceHeader, TraceWriter
from tools.trace.openb.lists import OpenbError, fits_no_node, read_nodes, read_pods
from tools.trace.truth import GroundTruth, Occupancy

IMPORTER_REVISION = 1
QOS = {"LS": (JobKind.SERVICE, 9), "Guaranteed": (JobKind.SERVICE, 9), "Burstable": (JobKind.BATCH, 5),
       "BE": (JobKind.BATCH, 0)}
"""QoS class -> (kind, priority); any other class is batch of priority 0, counted."""
MAX_OCCUPANCY_POINTS = 4000


@dataclass
class OpenbStats:
    machines: int = 0
    gpus: int = 0
    pods: int = 0
    jobs: int = 0
    never_scheduled: int = 0
    no_creation_time: int = 0
    gpu_spec_no_node_has: int = 0
    no_node_fits: int = 0  # pods no node could hold even empty (lists.fits_no_node)
    unknown_qos: dict[str, int] = field(default_factory=dict)
    ignored_columns: tuple[str, ...] = ()
    absent_columns: tuple[str, ...] = ()  # optional pod-list columns the list leaves out (``POD_OPTIONAL``)

    def summary(self) -> str:
        parts = [f"{self.machines} machines ({self.gpus} GPUs)", f"{self.jobs} of {self.pods} pods as jobs",
                 f"{self.never_scheduled} never scheduled by the real cell (no delay in the truth)",
                 f"{self.no_creation_time} without creation_time skipped",
                 f"{self.gpu_spec_no_node_has} asking a GPU model no node has",
                 f"{self.no_node_fits} asking more CPU, memory or GPUs than any node (of their models) has"]
        if self.unknown_qos:
            parts.append("unknown qos as batch priority 0: " + ", ".join(f"{k} {n}" for k, n in self.unknown_qos.items()))
        if self.ignored_columns:
            parts.append("ignored columns: " + ", ".join(self.ignored_columns))
        if self.absent_columns:
            parts.append("absent optional columns: " + ", ".join(self.absent_columns)
                         + (" (no memory asked: 0 MiB per pod)" if "memory_mib" in self.absent_columns else ""))
        return "; ".join(parts)


def import_openb(nodes_path: str, pods_path: str, out) -> OpenbStats:
    """Write the omega trace of an openb node list and pod list to ``out`` (nothing is written
    on an error: OpenbError naming the file and line)."""
    nodes, node_stats = read_nodes(nodes_path)
    pods, pod_stats = read_pods(pods_path)
    if "creation_time" in pod_stats.absent_columns:
        raise OpenbError(f"{pods_path}: no creation_time column: a timed replay needs the pods' times "
                         "(the untimed experiment is `omega experiment gpu-frag`)")
    stats = OpenbStats(machines=len(nodes), gpus=sum(n.gpus for n in nodes), pods=len(pods),
                       ignored_columns=tuple(sorted(set(node_stats.ignored_columns) | set(pod_stats.ignored_columns))),
                       absent_columns=pod_stats.absent_columns)
    models = {n.model for n in nodes if n.gpus}
    timed = [p for p in pods if p.created is not None]
    stats.no_creation_time = len(pods) - len(timed)
    stats.no_node_fits = fits_no_node(((p.cpu, p.memory, p.num_gpu, p.models) for p in timed), nodes)
    if not timed:
        raise OpenbError(f"{pods_path}: no pod has a creation_time")
    t0 = min(p.created for p in timed)
    machines = [n.machine() for n in nodes]
    events: list = []
    submitted: dict[str, float] = {}
    delays: dict[str, list[float | None]] = {}
    changes: list[tuple[float, int, int]] = []  # (t, +-cpu, +-memory) of the pods the real cell ran
    for p in timed:
        kind, priority = QOS.get(p.qos, (JobKind.BATCH, 0))
        if p.qos not in QOS:
            stats.unknown_qos[p.qos] = stats.unknown_qos.get(p.qos, 0) + 1
        if p.models and not set(p.models) & models:
            stats.gpu_spec_no_node_has += 1
        job = Job(p.name, kind, 1, p.request(), priority=priority, owner=p.qos, constraints=p.constraints())
        t = p.created - t0
        events.append((t, 0, JobSubmit(t, job)))
        if p.deleted is not None:
            events.append((p.deleted - t0, 1, JobKill(p.deleted - t0, p.name)))
        if t > 0:
            submitted[p.name] = t
            ran = p.scheduled is not None
            delays[p.name] = [max(0.0, p.scheduled - p.created) if ran else None]
        if p.scheduled is None:
            stats.never_scheduled += 1
        else:
            end = p.deleted if p.deleted is not None else None
            changes.append((p.scheduled - t0, p.cpu, p.memory))
            if end is not None:
                changes.append((end - t0, -p.cpu, -p.memory))
        stats.jobs += 1
    events.sort(key=lambda e: (e[0], e[1]))  # at one instant: submissions, then kills (a pod's own kill after it)
    horizon = events[-1][0] if events else 0.0
    truth = GroundTruth("task", horizon, submitted, delays, _occupancy(changes, machines),
                        f"openb ground truth (importer revision {IMPORTER_REVISION}): scheduled_time - creation_time "
                        f"per pod; {stats.never_scheduled} pod(s) never scheduled (no scheduled_time) have no delay: "
                        "a replay placing them counts them apart; occupancy: CPU and memory of the pods the real "
                        "cell ran, scheduled to deleted")
    header = TraceHeader(
        source=f"openb {nodes_path} + {pods_path} (Alibaba cluster-trace-gpu-v2023)",
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        capacity_model=f"openb: {len(machines)} machines as listed (cpu_milli, memory_mib, gpu devices of 1000 "
                       "milli each, gpu_model label)",
        cell=os.path.basename(str(pods_path)).split(".")[0],
        notes=f"importer revision {IMPORTER_REVISION}; t = creation_time - {t0:g}; a pod = a one-task job killed at "
              f"deletion_time; qos LS/Guaranteed: service priority 9, Burstable: batch 5, BE: batch 0; "
              f"{stats.summary()}")
    with TraceWriter(out, header, atomic=True, truth=truth) as writer:
        for machine in machines:
            writer.write(MachineAdd(0.0, machine))
        for _, _, event in events:
            writer.write(event)
    return stats


def _occupancy(changes: list[tuple[float, int, int]], machines: list[Machine]) -> Occupancy | None:
    """The running sums of ``changes`` at each time (at most MAX_OCCUPANCY_POINTS, evenly thinned)."""
    if not changes:
        return None
    changes.sort(key=lambda c: (c[0], c[1] > 0))  # ends before starts at one instant
    t, cpu, memory, tasks = [], [], [], []
    c = m = n = 0
    for at, dc, dm in changes:
        c, m, n = c + dc, m + dm, n + (1 if dc > 0 else -1)
        if t and t[-1] == at:
            cpu[-1], memory[-1], tasks[-1] = c, m, n
        else:
            t.append(at), cpu.append(c), memory.append(m), tasks.append(n)
    step = max(1, -(-len(t) // MAX_OCCUPANCY_POINTS))
    keep = range(0, len(t), step)
    return Occupancy([t[i] for i in keep], [cpu[i] for i in keep], [memory[i] for i in keep],
                     [tasks[i] for i in keep], sum(x.capacity.cpu for x in machines),
                     sum(x.capacity.memory for x in machines))
