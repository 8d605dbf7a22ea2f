"""Read openb node and pod lists (CSV, optionally gzipped) into plain records.

Node list columns: ``sn, cpu_milli, memory_mib, gpu, model`` (model empty or ``nan`` for a
node without GPUs). Pod list columns: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli,
gpu_spec, qos, pod_phase, creation_time, deletion_time, scheduled_time`` (``memory_mib`` and the
last six may be absent: ``POD_OPTIONAL``), in any order; ``gpu_spec`` is
empty or a ``|``-separated set of allowed GPU models. Times are seconds; an empty or ``nan``
time is unknown (None). Extra columns are ignored and named in ``ListStats.ignored_columns``.

Every row is checked: a bad value raises ``OpenbError`` naming the file, line and column, and
nothing is returned (one bad row spoils the list: a study on a silently shortened list is
worse than none).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from cellstate.devices import (
    MAX_DEVICES, MILLI, MODEL_LABEL, DeviceError, ask_request, gpu_capacity, model_constraint,
)
from cellstate.model import Constraint, Machine
from cellstate.resources import Resources

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("memory_mib", "gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
"""Columns some lists leave out (the multigpu variants have only the first five, the ``nomem``
variants no ``memory_mib``): absent means no memory asked (0 MiB), no model constraint, empty QoS
and phase, unknown times (``ListStats.absent_columns``, shown by the importer and the experiment)."""
_MISSING = ("", "nan", "NaN", "None")


class OpenbError(ValueError):
    """A node or pod list that cannot be read; the message names file, line and column."""


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    cpu: int
    memory: int
    gpus: int
    model: str

    def machine(self) -> Machine:
        """The node as a cell machine: its GPUs as devices, its model as the ``gpu_model`` label."""
        return Machine(self.name, Resources.of(self.cpu, self.memory, 0, **gpu_capacity(self.gpus)),
                       labels=((MODEL_LABEL, self.model),) if self.model else ())


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    cpu: int
    memory: int
    num_gpu: int
    gpu_milli: int
    models: tuple[str, ...]
    qos: str
    phase: str
    created: float | None
    deleted: float | None
    scheduled: float | None

    @property
    def gpu(self) -> int:
        """The pod's GPU demand in milli (num_gpu × gpu_milli)."""
        return self.num_gpu * self.gpu_milli

    def request(self) -> Resources:
        """A task's request for the pod: CPU, memory and its GPU ask (``cellstate.devices``)."""
        return Resources.of(self.cpu, self.memory, 0, gpu=ask_request(self.num_gpu, self.gpu_milli))

    def constraints(self) -> tuple[Constraint, ...]:
        """Its ``gpu_spec`` as a constraint on the machines' GPU model (none when any model)."""
        return (model_constraint(self.models),) if self.models else ()


@dataclass
class ListStats:
    rows: int = 0
    ignored_columns: tuple[str, ...] = ()
    absent_columns: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)


def _open_text(path: Path) -> io.TextIOBase:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OpenbError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as exc:
            raise OpenbError(f"{path}: truncated or corrupt gzip: {exc}") from None
    try:
        return io.StringIO(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise OpenbError(f"{path}: not UTF-8 text: {exc}") from None


def _rows(path: Path, required: tuple[str, ...], stats: ListStats, optional: tuple[str, ...] = ()):
    reader = csv.reader(_open_text(path))
    try:
        header = next(reader)
    except StopIteration:
        raise OpenbError(f"{path}: empty file (expected a header with {', '.join(required)})") from None
    except csv.Error as exc:
        raise OpenbError(f"{path}: line 1: {exc}") from None
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise OpenbError(f"{path}: line 1: missing column(s) {', '.join(missing)} "
                         f"(is this an openb {'node' if 'sn' in required else 'pod'} list?)")
    stats.ignored_columns = tuple(h for h in header if h not in required and h not in optional and h)
    stats.absent_columns = tuple(c for c in optional if c not in header)
    where = {c: header.index(c) for c in required + optional if c in header}
    try:
        for number, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise OpenbError(f"{path}: line {number}: {len(row)} fields, the header has {len(header)}")
            stats.rows += 1
            values = dict.fromkeys(stats.absent_columns, "")
            values.update((c, row[i].strip()) for c, i in where.items())
            yield number, values
    except csv.Error as exc:
        raise OpenbError(f"{path}: line {reader.line_num}: {exc}") from None


def _int(path: Path, number: int, column: str, text: str, low: int = 0, high: int = 2**53) -> int:
    try:
        value = float(text) if text not in _MISSING else None
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value != int(value) or not low <= value <= high:
        raise OpenbError(f"{path}: line {number}: {column} must be an integer in [{low}, {high}], got {text!r}")
    return int(value)


def _time(path: Path, number: int, column: str, text: str) -> float | None:
    if text in _MISSING:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise OpenbError(f"{path}: line {number}: {column} must be a time >= 0 in seconds or empty, got {text!r}")
    return value


def read_nodes(path: str | Path) -> tuple[list[OpenbNode], ListStats]:
    """The nodes of an openb node list, in file order."""
    path, stats, nodes, names = Path(path), ListStats(), [], set()
    for number, row in _rows(path, NODE_COLUMNS, stats):
        name = row["sn"]
        if not name or name in names:
            raise OpenbError(f"{path}: line {number}: sn must be a unique non-empty name, got {name!r}")
        names.add(name)
        gpus = _int(path, number, "gpu", row["gpu"], 0, MAX_DEVICES)
        model = "" if row["model"] in _MISSING else row["model"]
        if gpus and not model:
            raise OpenbError(f"{path}: line {number}: a node with {gpus} GPU(s) needs a model")
        nodes.append(OpenbNode(name, _int(path, number, "cpu_milli", row["cpu_milli"], 1),
                               _int(path, number, "memory_mib", row["memory_mib"]), gpus, model if gpus else ""))
    if not nodes:
        raise OpenbError(f"{path}: no nodes")
    return nodes, stats


def fits_no_node(asks, nodes: list[OpenbNode]) -> int:
    """How many of ``asks`` (``(cpu, memory, num_gpu, models)`` per pod) no node could hold even
    empty: more CPU, memory or GPUs than every node of an allowed model has. A pod naming only
    models no node has is left out (counted apart as such)."""
    known = {n.model for n in nodes if n.gpus}
    verdicts: dict[tuple, bool] = {}
    count = 0
    for ask in asks:
        cpu, memory, gpus, models = ask
        if models and not set(models) & known:
            continue
        if ask not in verdicts:
            verdicts[ask] = not any(cpu <= n.cpu and memory <= n.memory and gpus <= n.gpus
                                    and (not models or n.model in models) for n in nodes)
        count += verdicts[ask]
    return count


def read_pods(path: str | Path) -> tuple[list[OpenbPod], ListStats]:
    """The pods of an openb pod list, in file order."""
    path, stats, pods, names = Path(path), ListStats(), [], set()
    for number, row in _rows(path, POD_COLUMNS, stats, POD_OPTIONAL):
        name = row["name"]
        if not name or name in names:
            raise OpenbError(f"{path}: line {number}: name must be a unique non-empty name, got {name!r}")
        names.add(name)
        num_gpu = _int(path, number, "num_gpu", row["num_gpu"], 0, MAX_DEVICES)
        gpu_milli = _int(path, number, "gpu_milli", row["gpu_milli"], 0, MILLI)
        if num_gpu == 0:
            gpu_milli = 0  # (a CPU pod's gpu_milli says nothing)
        try:
            ask_request(num_gpu, gpu_milli)
        except DeviceError as exc:
            raise OpenbError(f"{path}: line {number}: {exc}") from None
        spec = "" if row["gpu_spec"] in _MISSING else row["gpu_spec"]
        models = tuple(sorted({m.strip() for m in spec.split("|") if m.strip()}))
        if spec and not models:
            raise OpenbError(f"{path}: line {number}: gpu_spec {spec!r} names no model")
        created = _time(path, number, "creation_time", row["creation_time"])
        deleted = _time(path, number, "deletion_time", row["deletion_time"])
        scheduled = _time(path, number, "scheduled_time", row["scheduled_time"])
        if created is not None and deleted is not None and deleted < created:
            raise OpenbError(f"{path}: line {number}: deletion_time {deleted:g} is before creation_time {created:g}")
        memory = 0 if "memory_mib" in stats.absent_columns else _int(path, number, "memory_mib", row["memory_mib"])
        pods.append(OpenbPod(name, _int(path, number, "cpu_milli", row["cpu_milli"]), memory, num_gpu, gpu_milli, models,
                             row["qos"], row["pod_phase"], created, deleted, scheduled))
    if not pods:
        raise OpenbError(f"{path}: no pods")
    return pods, stats
