"""Cell specs: how many machines of which shapes, where, with what; and writing them to a cell.

A spec (TOML/JSON file or CLI flags) is expanded deterministically by its seed: machine ``i``
is ``m00000``…, placed round-robin over zones (``zone-a``…) and over the racks of its zone
(``zone-a-r00``…), with a shape and a platform drawn by weight, a random subset of
``packages_per_machine`` cached packages and one drawn value per label.
"""

from __future__ import annotations

import json
import random
import string
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cellstate.codec.records import encode_machine
from cellstate.devices import MAX_DEVICES, MODEL_LABEL, device_count, gpu_capacity
from cellstate.jobspec import FieldError, mebibytes
from cellstate.keys import CellKeys
from cellstate.model import Machine
from cellstate.resources import Resources
from cellstate.store import Delete, Put, Store, StoreError, missing
from cellstate.submit import txn_chunks

GIB = 1024


@dataclass(frozen=True, slots=True)
class Shape:
    """A machine capacity, its relative weight among the spec's shapes and the labels every
    machine of the shape carries (a GPU shape: its ``gpu_model``)."""

    capacity: Resources
    weight: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()


DEMO_SHAPES = (
    Shape(Resources.of(8_000, 32 * GIB, 512 * GIB), 3.0),
    Shape(Resources.of(16_000, 64 * GIB, 1024 * GIB), 2.0),
    Shape(Resources.of(32_000, 128 * GIB, 2048 * GIB), 1.0),
)


DEMO_GPU_SHAPES = (  # ``omega demo --gpu``: a mix shaped like Alibaba's openb cluster (docs/GPU.md)
    Shape(Resources.of(96_000, 512 * GIB, 0, **gpu_capacity(8)), 3.0, ((MODEL_LABEL, "V100M32"),)),
    Shape(Resources.of(64_000, 256 * GIB, 0, **gpu_capacity(2)), 2.0, ((MODEL_LABEL, "P100"),)),
    Shape(Resources.of(96_000, 384 * GIB, 0, **gpu_capacity(1)), 2.0, ((MODEL_LABEL, "T4"),)),
    Shape(Resources.of(32_000, 128 * GIB, 1024 * GIB), 1.0),
)


MAX_MACHINES = 1_000_000  # a bound, so a mistyped count fails at once instead of exhausting memory
MAX_PACKAGES = 100_000


@dataclass(frozen=True, slots=True)
class CellSpec:
    """What ``init_cell`` builds (defaults: the demo cell)."""

    machines: int = 1000
    shapes: tuple[Shape, ...] = DEMO_SHAPES
    zones: int = 3
    racks_per_zone: int = 10
    platforms: tuple[tuple[str, float], ...] = (("x86-64", 4.0), ("arm64", 1.0))
    packages: tuple[str, ...] = tuple(f"pkg-{i:02d}" for i in range(20))
    packages_per_machine: int = 5
    labels: tuple[tuple[str, tuple[str, ...]], ...] = (("disk", ("ssd", "hdd")),)
    seed: int = 0

    def __post_init__(self):
        checks = [("machines", 1 <= self.machines <= MAX_MACHINES), ("zones", 1 <= self.zones <= 26),
                  ("racks_per_zone", self.racks_per_zone >= 1), ("shapes", bool(self.shapes)),
                  ("packages_per_machine", 0 <= self.packages_per_machine <= len(self.packages))]
        for name, ok in checks:
            if not ok:
                raise CellSpecError(name, f"invalid value {getattr(self, name)!r}")
        if any(s.weight <= 0 or s.capacity.is_negative() for s in self.shapes):
            raise CellSpecError("shapes", "weights must be > 0 and capacities >= 0")
        if any(w <= 0 for _, w in self.platforms):
            raise CellSpecError("platforms", "weights must be > 0")


class CellSpecError(ValueError):
    """An invalid cell spec; names the field."""

    def __init__(self, field: str, message: str, source: str = ""):
        self.field, self.message = field, message
        super().__init__(f"{source + ': ' if source else ''}cell spec field {field!r}: {message}")


class CellExists(StoreError):
    """``init_cell`` found ``machines`` machines in ``cell`` and was not asked to replace them."""

    def __init__(self, cell: str, machines: int | None = None):
        self.cell, self.machines = cell, machines
        super().__init__(f"cell {cell!r}: machines appeared while initializing it" if machines is None else
                         f"cell {cell!r} already has {machines} machines "
                         "(init_cell(..., replace=True) starts a fresh cell)")


# ----------------------------------------------------------------------------- machines


def zone_name(index: int) -> str:
    return f"zone-{string.ascii_lowercase[index]}"


def build_machines(spec: CellSpec) -> list[Machine]:
    """The machines of the spec, identical for identical specs (seeded)."""
    rng = random.Random(spec.seed)
    shape_weights = [s.weight for s in spec.shapes]
    platform_names = [name for name, _ in spec.platforms]
    platform_weights = [w for _, w in spec.platforms]
    width = max(5, len(str(spec.machines - 1)))
    machines = []
    for i in range(spec.machines):
        zone = i % spec.zones
        rack = (i // spec.zones) % spec.racks_per_zone
        shape = rng.choices(spec.shapes, shape_weights)[0]
        machines.append(Machine(
            id=f"m{i:0{width}d}",
            capacity=shape.capacity,
            zone=zone_name(zone),
            rack=f"{zone_name(zone)}-r{rack:02d}",
            platform=rng.choices(platform_names, platform_weights)[0] if platform_names else "",
            packages=frozenset(rng.sample(spec.packages, spec.packages_per_machine)),
            labels=tuple((name, rng.choice(values)) for name, values in spec.labels if values) + shape.labels,
        ))
    return machines


def gpu_mix(machines) -> str:
    """``38 GPUs on 7 machines (32 V100M32, 6 P100)``; empty for a cell without GPUs."""
    by_model: Counter[str] = Counter()
    holders = 0
    for m in machines:
        if n := device_count(m.capacity):
            holders += 1
            by_model[dict(m.labels).get(MODEL_LABEL, "no model")] += n
    if not holders:
        return ""
    return (f"{sum(by_model.values())} GPUs on {holders} machines ("
            + ", ".join(f"{n} {model}" for model, n in by_model.most_common()) + ")")


def init_cell(store: Store, keys: CellKeys, spec: CellSpec, replace: bool = False) -> int:
    """Write the spec's machines into the cell; return the revision after the last txn.

    Refuses (CellExists) when the cell already has machines, unless ``replace``: then the
    cell's machines, allocs, jobs and kill markers are deleted first (a fresh cell: job ids may
    be submitted again, so their markers go with them). Machines are written
    in txns as big as ``store.max_txn_ops`` and the request-size limit allow, each guarded by
    ``missing`` compares on its keys, so a concurrent init fails rather than interleaves.
    """
    existing = store.range(keys.kind_prefix("machines"))
    if existing.kvs and not replace:
        raise CellExists(keys.cell, len(existing.kvs))
    if replace:
        store.txn([], [Delete(keys.kind_prefix(kind), prefix=True) for kind in ("machines", "allocs", "jobs", "kills")],
                  [])
    revision = 0
    for chunk in txn_chunks([(keys.machine(m.id), encode_machine(m)) for m in build_machines(spec)],
                         store.max_txn_ops, store.max_request_bytes):
        result = store.txn([missing(k) for k, _ in chunk], [Put(k, v) for k, v in chunk], [])
        if not result.succeeded:
            raise CellExists(keys.cell)
        revision = result.revision
    return revision


# -------------------------------------------------------------------------------- files


_FIELDS = frozenset("machines shapes zones racks_per_zone platforms packages packages_per_machine "
                    "labels seed".split())


def load_cell_spec(path: str | Path) -> CellSpec:
    """A CellSpec from TOML/JSON; CellSpecError naming the file and field otherwise.

    Fields as CellSpec; ``shapes`` is a list of {cpu (cores), memory, disk (MiB or "32Gi"),
    gpu, weight}; ``platforms`` a map name -> weight; ``packages`` a list of names or a count
    (``pkg-00``…); ``labels`` a map name -> list of values.
    """
    path = Path(path)
    try:
        text = path.read_text()
        doc = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CellSpecError("", f"cannot read: {exc}", str(path)) from None
    try:
        return cell_spec_from_mapping(doc)
    except CellSpecError as exc:
        raise CellSpecError(exc.field, exc.message, str(path)) from None


def cell_spec_from_mapping(d) -> CellSpec:
    """A CellSpec from a decoded mapping (missing fields: the demo defaults)."""
    if not isinstance(d, dict):
        raise CellSpecError("", "must be a table of fields")
    unknown = sorted(str(k) for k in d if k not in _FIELDS)
    if unknown:
        raise CellSpecError(unknown[0], f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    kw: dict = {}
    for name in ("machines", "zones", "racks_per_zone", "packages_per_machine", "seed"):
        if name in d:
            if type(d[name]) is not int:
                raise CellSpecError(name, f"must be an integer, got {d[name]!r}")
            kw[name] = d[name]
    if "shapes" in d:
        kw["shapes"] = tuple(parse_shape(s, f"shapes[{i}]") for i, s in enumerate(_list(d, "shapes")))
    if "platforms" in d:
        kw["platforms"] = tuple((str(k), _weight(f"platforms.{k}", w)) for k, w in _map(d, "platforms").items())
    if "packages" in d:
        kw["packages"] = package_names(d["packages"])
    if "labels" in d:
        kw["labels"] = tuple((str(k), tuple(map(str, _list(_map(d, "labels"), k))))
                             for k in _map(d, "labels"))
    return CellSpec(**kw)


def parse_shape(s, field: str = "shape") -> Shape:
    """A Shape from {cpu, memory, disk, gpu, gpu_model, weight} (cores; MiB or "64Gi"; ``gpu``
    whole GPUs, each a device of 1000 milli; ``gpu_model`` their model, the machines' label)."""
    if not isinstance(s, dict):
        raise CellSpecError(field, f"must be a table {{cpu, memory, disk, gpu, gpu_model, weight}}, got {s!r}")
    unknown = sorted(str(k) for k in s if k not in ("cpu", "memory", "disk", "gpu", "gpu_model", "weight"))
    if unknown or "cpu" not in s or "memory" not in s:
        raise CellSpecError(field, "needs cpu and memory; may have disk, gpu, gpu_model, weight"
                            + (f" (unknown: {unknown[0]})" if unknown else ""))
    cpu = s["cpu"]
    if type(cpu) not in (int, float) or cpu <= 0:
        raise CellSpecError(field + ".cpu", f"must be > 0 cores, got {cpu!r}")
    gpu = s.get("gpu", 0)
    if type(gpu) is not int or not 0 <= gpu <= MAX_DEVICES:
        raise CellSpecError(field + ".gpu", f"must be an integer 0..{MAX_DEVICES}, got {gpu!r}")
    model = s.get("gpu_model", "")
    if not isinstance(model, str) or (model and not gpu):
        raise CellSpecError(field + ".gpu_model", f"a GPU model name goes with gpu > 0, got {model!r}")
    try:
        memory, disk = mebibytes("memory", s["memory"]), mebibytes("disk", s.get("disk", 0))
    except FieldError as exc:
        raise CellSpecError(f"{field}.{exc.field}", exc.message) from None
    return Shape(Resources.of(round(cpu * 1000), memory, disk, **gpu_capacity(gpu)),
                 _weight(field + ".weight", s.get("weight", 1.0)), ((MODEL_LABEL, model),) if model else ())


def package_names(x) -> tuple[str, ...]:
    """Package names from a list of names or a count n (``pkg-00`` … ``pkg-{n-1}``)."""
    if type(x) is int and 0 <= x <= MAX_PACKAGES:
        return tuple(f"pkg-{i:02d}" for i in range(x))
    if isinstance(x, list) and all(isinstance(p, str) and p for p in x) and len(set(x)) == len(x):
        return tuple(x)
    raise CellSpecError("packages", f"must be a count (at most {MAX_PACKAGES}) or a list of distinct names, "
                                    f"got {x!r}")


def _weight(field: str, w) -> float:
    if type(w) not in (int, float) or w <= 0:
        raise CellSpecError(field, f"must be a number > 0, got {w!r}")
    return float(w)


def _list(d: dict, name: str) -> list:
    if not isinstance(d[name], list):
        raise CellSpecError(name, f"must be a list, got {d[name]!r}")
    return d[name]


def _map(d: dict, name: str) -> dict:
    if not isinstance(d[name], dict):
        raise CellSpecError(name, f"must be a table, got {d[name]!r}")
    return d[name]
