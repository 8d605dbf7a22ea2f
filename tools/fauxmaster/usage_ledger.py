"""``UsageLedger``: capacity and allocation per machine of the replayed cell, followed from the
same changes the cell applies (``tools.fauxmaster.cell.SimCell``), so utilization needs no store
scan."""

from __future__ import annotations

from dataclasses import dataclass, field

from cellstate.model import Alloc, Machine

_NO_ROW = (0, 0, 0, 0)  # the usage row of a machine not followed yet


@dataclass(slots=True)
class UsageLedger:
    """Capacity and allocation (cpu millicores, memory MiB) of every up machine, their sums
    over the machines (ints: kept exactly as machines come, go and are charged), and each
    machine's cpu share (allocated ÷ capacity, 0.0 without capacity) as of its last change."""

    machines: dict[str, list[int]] = field(default_factory=dict)
    """machine → [capacity cpu, capacity memory, allocated cpu, allocated memory]"""
    totals: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    """the sums of ``machines``' lists"""
    shares: dict[str, float] = field(default_factory=dict)
    """machine → its cpu share (the machines in the same order)"""
    extra: dict[str, list[int]] = field(default_factory=dict)
    """extra resource (gpu, …) → [capacity, allocated] summed over the up machines (empty: none has any)"""
    machine_extra: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    """machine → extra resource → [capacity, allocated], for the up machines with an extra resource"""

    def add_machine(self, machine: Machine) -> None:
        """Follow ``machine`` (one already followed is replaced in its place)."""
        capacity, allocated, machine_id = machine.capacity, machine.allocated, machine.id
        row = [capacity.cpu, capacity.memory, allocated.cpu, allocated.memory]
        old = self.machines.get(machine_id, _NO_ROW)
        self.machines[machine_id] = row
        self.shares[machine_id] = row[2] / row[0] if row[0] else 0.0
        totals = self.totals
        totals[0] += row[0] - old[0]
        totals[1] += row[1] - old[1]
        totals[2] += row[2] - old[2]
        totals[3] += row[3] - old[3]
        if self.machine_extra:
            self._drop_extra(machine_id)
        if capacity.extra or allocated.extra:
            rows = {name: [amount, 0] for name, amount in capacity.extra}
            for name, amount in allocated.extra:
                rows.setdefault(name, [0, 0])[1] += amount
            self.machine_extra[machine_id] = rows
            for name, (cap, used) in rows.items():
                total = self.extra.setdefault(name, [0, 0])
                total[0] += cap
                total[1] += used

    def remove_machine(self, machine_id: str) -> None:
        row = self.machines.pop(machine_id, None)
        if row is not None:
            del self.shares[machine_id]
            self.totals = [total - x for total, x in zip(self.totals, row)]
            if self.machine_extra:
                self._drop_extra(machine_id)

    def _drop_extra(self, machine_id: str) -> None:
        """Take a machine's extra resources out of the sums."""
        for name, (cap, used) in self.machine_extra.pop(machine_id, {}).items():
            total = self.extra[name]
            total[0] -= cap
            total[1] -= used

    def charge_extra(self, machine_id: str, extra: tuple[tuple[str, int], ...], sign: int = 1) -> None:
        """Charge a followed machine ``sign`` × the extra resources ``extra`` (a ``Resources.extra``)."""
        if machine_id not in self.machines:
            return
        rows = self.machine_extra.setdefault(machine_id, {})
        for name, amount in extra:
            rows.setdefault(name, [0, 0])[1] += sign * amount
            self.extra.setdefault(name, [0, 0])[1] += sign * amount

    def charge(self, machine_id: str, cpu: int, memory: int) -> None:
        row = self.machines.get(machine_id)
        if row is not None:
            row[2] += cpu
            row[3] += memory
            self.shares[machine_id] = row[2] / row[0] if row[0] else 0.0
            totals = self.totals
            totals[2] += cpu
            totals[3] += memory

    def release(self, allocs: list[Alloc]) -> None:
        """``charge`` each alloc's machine minus its cpu and memory, in order (a task end's or
        a kill's allocs: one call, not one per alloc)."""
        machines, shares, totals = self.machines, self.shares, self.totals
        for alloc in allocs:
            machine_id = alloc.machine_id
            row = machines.get(machine_id)
            if row is not None:
                request = alloc.resources
                if request.extra:
                    self.charge_extra(machine_id, request.extra, -1)
                cpu, memory = -request.cpu, -request.memory
                row[2] += cpu
                row[3] += memory
                shares[machine_id] = row[2] / row[0] if row[0] else 0.0
                totals[2] += cpu
                totals[3] += memory
