"""The cell a Google-2011 import describes: machine capacities (the seeded capacity model, or the
trace's own ``machine_events`` table) and the cell model (docs/TRACE_FORMAT.md, "Cell models").

``plain``: every machine's capacity is its physical capacity; every task is admitted against it.

``overcommit`` (Borg's resource reclamation, Verma et al. 2015 §5.5: "the Borg scheduler uses
limits to calculate feasibility for prod tasks, so they never rely on reclaimed resources ...
for non-prod tasks, it uses the reservations of existing tasks so the new tasks can be scheduled
into reclaimed resources"). The trace gives limits (requests) only, no reservations, so:

- production (priority >= 9) is admitted against the machine's **physical** capacity: a
  production job's request also carries ``prod_cpu`` / ``prod_memory`` (= its cpu and memory)
  and each machine has ``prod_cpu`` / ``prod_memory`` capacities = its physical cpu and memory.
  The ordinary resource fit (``resources_fit``, the committer's ledger check, ``omega check``)
  then keeps the production tasks on a machine within its physical capacity;
- every task (production and not) is admitted against the machine's **schedulable** capacity
  (cpu, memory): physical × (1 + reclaim), the reclaimable share non-production work runs in;
- the recorded t = 0 state must fit (the real cell ran it): per machine, the physical capacity
  is raised, on a grid of 1/32 of the largest machine, to hold its recorded t = 0 production
  requests, and the schedulable capacity to hold all its recorded t = 0 requests (and disk);
- schedulable cpu and memory are rounded up to 1/8 of the largest machine (8,000 millicores,
  32 GiB): machines of a few capacity classes (the service scheduler's index keeps one list per
  class: part 0 has 155 classes so, 1,635 without the rounding);
- ``reclaim`` (per resource) is derived from the trace's own t = 0 state unless given: the real
  cell's overcommit when the window opens, Σ t = 0 requests ÷ Σ physical capacity − 1 (at least
  0), over the machines of the cell. Nothing is a constant fitted to one part.

No randomness beyond the capacity model's seeded draw (the derivation is a pure function of the
trace). The cell's data model is unchanged: the mechanism is two extra resources.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import math
from dataclasses import dataclass, field

from cellstate.resources import Resources
from tools.trace.google2011.schema import CPU_SCALE, DISK_SCALE, MEMORY_SCALE

CELL_MODELS = ("plain", "overcommit")
PROD_CPU, PROD_MEMORY = "prod_cpu", "prod_memory"
GRID = 32  # physical capacities raised to hold the t = 0 production go up in steps of 1/GRID of the largest machine
SCHEDULABLE_GRID = 8  # schedulable cpu and memory are multiples of 1/SCHEDULABLE_GRID of the largest machine
ADD, REMOVE, UPDATE = 0, 1, 2


class MachineEventsError(ValueError):
    """A malformed machine_events file (names the file and line)."""


@dataclass(frozen=True)
class CellModel:
    """``name``: plain or overcommit; ``reclaim``: the reclaimable share (overcommit only; None:
    derived from the trace's t = 0 state)."""

    name: str = "overcommit"
    reclaim: float | None = None

    def __post_init__(self):
        if self.name not in CELL_MODELS:
            raise ValueError(f"unknown cell model {self.name!r} (expected {' or '.join(CELL_MODELS)})")
        if self.reclaim is not None:
            if self.name != "overcommit":
                raise ValueError("a reclaimable share (--reclaim) needs the overcommit cell model")
            if not (isinstance(self.reclaim, (int, float)) and math.isfinite(self.reclaim) and self.reclaim >= 0):
                raise ValueError(f"reclaim must be a number >= 0, got {self.reclaim!r}")


def parse_reclaim(text: str) -> float | None:
    """``--reclaim``: "auto" (None: derived) or a number >= 0; ValueError otherwise."""
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--reclaim must be 'auto' or a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"--reclaim must be 'auto' or a number >= 0, got {text!r}")
    return value


def _up(amount: int, step: int) -> int:
    return -(-amount // step) * step


@dataclass
class Overcommit:
    """The overcommit cell of a trace: per machine its physical and schedulable (cpu, memory)."""

    reclaim: tuple[float, float]
    derived: bool
    physical: dict[str, tuple[int, int]] = field(default_factory=dict)
    schedulable: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # cpu, memory, disk
    raised_physical: int = 0
    raised_schedulable: int = 0
    steps: tuple[int, int] = (1, 1)  # the schedulable grid: cpu millicores, memory MiB

    def capacity(self, machine_id: str) -> Resources:
        cpu, memory = self.physical[machine_id]
        s_cpu, s_memory, disk = self.schedulable[machine_id]
        return Resources.of(s_cpu, s_memory, disk, **{PROD_CPU: cpu, PROD_MEMORY: memory})

    def later(self, cpu: int, memory: int, disk: int) -> Resources:
        """The capacity of a machine added after t = 0 (nothing recorded on it)."""
        r_cpu, r_memory = self.reclaim
        return Resources.of(_up(math.floor(cpu * (1 + r_cpu)), self.steps[0]),
                            _up(math.floor(memory * (1 + r_memory)), self.steps[1]), disk,
                            **{PROD_CPU: cpu, PROD_MEMORY: memory})

    def describe(self, cpu_scale: int, memory_scale: int) -> str:
        r_cpu, r_memory = self.reclaim
        how = ("derived from the trace's t = 0 state: sum of recorded t = 0 requests / sum of physical "
               "capacity - 1, at least 0" if self.derived else "given (--reclaim)")
        return (f"cell model overcommit (Borg resource reclamation): production (priority >= 9) admitted "
                f"against physical capacity (requests and machines carry {PROD_CPU}/{PROD_MEMORY} = physical), "
                f"every task against schedulable = physical x (1 + reclaim); reclaim cpu {r_cpu:.4f} memory "
                f"{r_memory:.4f} ({how}); per machine raised on a grid of 1/{GRID} of the largest machine "
                f"({cpu_scale // GRID} millicores, {memory_scale // GRID} MiB) to hold its recorded t = 0 "
                f"tasks: physical raised on {self.raised_physical} machines (production), schedulable "
                f"above physical x (1 + reclaim) on {self.raised_schedulable} (all tasks, or disk); "
                f"schedulable cpu and memory rounded up to 1/{SCHEDULABLE_GRID} of the largest machine "
                f"({self.steps[0]} millicores, {self.steps[1]} MiB)")


def overcommit_cell(physical: dict[str, Resources], placed: list[tuple[str, Resources, bool]],
                    reclaim: float | None, cpu_scale: int, memory_scale: int) -> Overcommit:
    """The overcommit cell (module docstring) of machines with ``physical`` capacities (core
    resources) holding the recorded t = 0 ``placed`` tasks: (machine, request, production)."""
    held: dict[str, list[int]] = {}
    for machine_id, request, prod in placed:
        row = held.get(machine_id)
        if row is None:
            row = held[machine_id] = [0, 0, 0, 0, 0]
        row[0] += request.cpu
        row[1] += request.memory
        row[2] += request.disk
        if prod:
            row[3] += request.cpu
            row[4] += request.memory
    cpu_step, memory_step = cpu_scale // GRID, memory_scale // GRID
    out = Overcommit((0.0, 0.0), reclaim is None, steps=(cpu_scale // SCHEDULABLE_GRID,
                                                        memory_scale // SCHEDULABLE_GRID))
    total = [0, 0, 0, 0]  # held cpu, memory; physical cpu, memory
    none = (0, 0, 0, 0, 0)
    for machine_id, cap in physical.items():
        cpu, memory, disk, p_cpu, p_memory = held.get(machine_id, none)
        phys = (max(cap.cpu, _up(p_cpu, cpu_step)), max(cap.memory, _up(p_memory, memory_step)))
        out.raised_physical += phys != (cap.cpu, cap.memory)
        out.physical[machine_id] = phys
        total[0] += cpu
        total[1] += memory
        total[2] += phys[0]
        total[3] += phys[1]
    if reclaim is None:
        out.reclaim = tuple(max(0.0, total[i] / total[i + 2] - 1) if total[i + 2] else 0.0 for i in (0, 1))
    else:
        out.reclaim = (float(reclaim), float(reclaim))
    r_cpu, r_memory = out.reclaim
    for machine_id, (p_cpu, p_memory) in out.physical.items():
        cpu, memory, disk, _, _ = held.get(machine_id, none)
        base = (math.floor(p_cpu * (1 + r_cpu)), math.floor(p_memory * (1 + r_memory)), physical[machine_id].disk)
        s = (max(base[0], cpu), max(base[1], memory), max(base[2], _up(disk, base[2] // GRID or 1)))
        out.raised_schedulable += s != base
        out.schedulable[machine_id] = (_up(s[0], out.steps[0]), _up(s[1], out.steps[1]), s[2])
    return out


# ------------------------------------------------------------------------- capacity model

# Published 2011 mix of normalized (cpu, memory) capacities and the percentage of machines (Reiss et al. 2012).
GOOGLE_2011_MIX = (
    ((0.5, 0.5), 53.47), ((0.5, 0.25), 30.74), ((0.5, 0.75), 7.95), ((1.0, 1.0), 6.32),
    ((0.25, 0.25), 0.99), ((0.5, 0.12), 0.43), ((0.5, 0.03), 0.04), ((0.5, 0.97), 0.03),
    ((1.0, 0.5), 0.02), ((0.5, 0.06), 0.01),
)
UNIFORM_CLASS = (0.5, 0.5)


@dataclass(frozen=True)
class CapacityModel:
    """How machine capacities are chosen: ``mix`` draws each machine's (cpu, memory) class
    from GOOGLE_2011_MIX by a hash of (seed, machine id), so the draw does not depend on the
    order machines are seen; ``uniform`` gives every machine UNIFORM_CLASS."""

    name: str = "mix"
    seed: int = 0

    def __post_init__(self):
        if self.name not in ("mix", "uniform"):
            raise ValueError(f"unknown capacity model {self.name!r} (expected mix or uniform)")

    def normalized(self, machine_id: str) -> tuple[float, float]:
        if self.name == "uniform":
            return UNIFORM_CLASS
        digest = hashlib.blake2b(f"{self.seed}:{machine_id}".encode(), digest_size=8).digest()
        point = int.from_bytes(digest) / 2**64 * 100.0
        for cls, share in GOOGLE_2011_MIX:
            point -= share
            if point < 0:
                return cls
        return GOOGLE_2011_MIX[0][0]

    def capacity(self, machine_id: str) -> Resources:
        cpu, memory = self.normalized(machine_id)
        return Resources(round(cpu * CPU_SCALE), round(memory * MEMORY_SCALE), DISK_SCALE)

    def describe(self) -> str:
        classes = ("published 2011 mix " + ", ".join(f"{c}:{s}%" for c, s in GOOGLE_2011_MIX)
                   + f" drawn per machine id by blake2b(seed={self.seed}:id)"
                   if self.name == "mix" else f"uniform: every machine {UNIFORM_CLASS}")
        return (f"google2011-{self.name}: normalized (cpu, memory) {classes}; 1.0 cpu = {CPU_SCALE} "
                f"millicores, 1.0 memory = {MEMORY_SCALE} MiB, disk {DISK_SCALE} MiB per machine; task "
                "requests scaled alike, rounded up, cpu/memory at least 1")


# ------------------------------------------------------------------------- machine_events


@dataclass
class MachineEvents:
    """The trace's machine_events table: each machine's normalized (cpu, memory) when the window
    opens (its last ADD/UPDATE row at or before it; None: the row left them blank), the machines
    up then, and the changes after: (timestamp_us, machine, ADD|REMOVE, cpu, memory)."""

    at_open: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    later: list[tuple[int, str, int, float | None, float | None]] = field(default_factory=list)
    updates_ignored: int = 0  # UPDATE rows after the window opened (the trace format has no capacity change)
    rows: int = 0


def read_machine_events(path: str, window_start_us: int, last_us: int | None = None) -> MachineEvents:
    """Parse a machine_events part file (gzip CSV, or plain CSV: timestamp, machine ID, event
    type, platform ID, CPUs, memory); rows after ``last_us`` are left out. MachineEventsError
    names the file and line of a malformed row."""
    out = MachineEvents()
    known: dict[str, tuple[float | None, float | None]] = {}
    opener = gzip.open if _is_gzip(path) else open
    try:
        with opener(path, "rt", newline="") as f:
            for number, row in enumerate(csv.reader(f), 1):
                _machine_row(path, number, row, window_start_us, last_us, out, known)
    except (EOFError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise MachineEventsError(f"{path}: not a readable machine_events file ({exc})") from None
    return out


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _machine_row(path, number, row, window_start_us, last_us, out, known) -> None:
    if len(row) != 6:
        raise MachineEventsError(f"{path}: line {number}: expected 6 columns, got {len(row)}")
    if not (row[0].isdecimal() and row[1].isdecimal() and row[2] in ("0", "1", "2")):
        raise MachineEventsError(f"{path}: line {number}: bad timestamp, machine id or event type {row[:3]!r}")
    amounts = []
    for text, name in ((row[4], "cpus"), (row[5], "memory")):
        try:
            value = float(text) if text else None
        except ValueError:
            value = -1.0
        if value is not None and not 0.0 <= value <= 1.0:
            raise MachineEventsError(f"{path}: line {number}: bad {name} {text!r} (expected a normalized "
                                     "amount 0..1)")
        amounts.append(value)
    ts, machine, kind = int(row[0]), row[1], int(row[2])
    if last_us is not None and ts > last_us:
        return
    out.rows = number
    if kind == UPDATE:  # keep the amounts the row gives; blanks leave the last known ones
        old = known.get(machine, (None, None))
        amounts = [new if new is not None else o for new, o in zip(amounts, old)]
    if ts <= window_start_us:
        if kind == REMOVE:
            out.at_open.pop(machine, None)
        elif kind == ADD or machine in out.at_open:
            out.at_open[machine] = tuple(amounts)
        known[machine] = tuple(amounts)
        return
    if kind == UPDATE:
        out.updates_ignored += 1
    else:
        out.later.append((ts, machine, kind, *amounts))
    if kind != REMOVE:
        known[machine] = tuple(amounts)
