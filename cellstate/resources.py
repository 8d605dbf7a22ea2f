"""Resource vectors: integer quantities so ledgers add up exactly.

Units: ``cpu`` in millicores, ``memory`` and ``disk`` in MiB; ``extra`` holds
optional scalar resources (``gpu``…) as a sorted tuple of ``(name, amount)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from cellstate.fastbuild import builder

CORE_NAMES = ("cpu", "memory", "disk")


@dataclass(frozen=True, slots=True)
class Resources:
    """An immutable, non-negative resource vector."""

    cpu: int = 0
    memory: int = 0
    disk: int = 0
    extra: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(cpu: int = 0, memory: int = 0, disk: int = 0, **extra: int) -> Resources:
        """Build a vector; extra resources with amount 0 are dropped."""
        items = tuple(sorted((k, v) for k, v in extra.items() if v))
        return Resources(cpu, memory, disk, items)

    def get(self, name: str) -> int:
        """Amount of resource ``name`` (0 when absent)."""
        if name == "cpu":
            return self.cpu
        if name == "memory":
            return self.memory
        if name == "disk":
            return self.disk
        for key, value in self.extra:
            if key == name:
                return value
        return 0

    def names(self) -> tuple[str, ...]:
        """Names of all resources this vector mentions."""
        return CORE_NAMES + tuple(k for k, _ in self.extra)

    def __add__(self, other: Resources) -> Resources:
        extra = _merge(self.extra, other.extra, 1) if self.extra or other.extra else ()
        return _build(self.cpu + other.cpu, self.memory + other.memory, self.disk + other.disk, extra)

    def __sub__(self, other: Resources) -> Resources:
        extra = _merge(self.extra, other.extra, -1) if self.extra or other.extra else ()
        return _build(self.cpu - other.cpu, self.memory - other.memory, self.disk - other.disk, extra)

    def scaled(self, factor: int) -> Resources:
        """This vector multiplied by an integer factor."""
        return Resources(
            self.cpu * factor,
            self.memory * factor,
            self.disk * factor,
            tuple((k, v * factor) for k, v in self.extra if v * factor),
        )

    def fits_in(self, free: Resources) -> bool:
        """True when every quantity of ``self`` is at most the one in ``free``."""
        if self.cpu > free.cpu or self.memory > free.memory or self.disk > free.disk:
            return False
        if self.extra:
            return all(v <= free.get(k) for k, v in self.extra)
        return True

    def shortfall(self, free: Resources) -> str | None:
        """Name of the first resource ``self`` needs more of than ``free`` has."""
        if not self.extra:  # core names only (every fit check of a commit): no lookups by name
            return ("cpu" if self.cpu > free.cpu else "memory" if self.memory > free.memory
                    else "disk" if self.disk > free.disk else None)
        for name in self.names():
            if self.get(name) > free.get(name):
                return name
        return None

    def is_negative(self) -> bool:
        """True when any quantity is below zero."""
        return self.cpu < 0 or self.memory < 0 or self.disk < 0 or any(v < 0 for _, v in self.extra)

    def to_dict(self) -> dict[str, int]:
        """Plain mapping (core resources always present)."""
        out = {"cpu": self.cpu, "memory": self.memory, "disk": self.disk}
        if self.extra:
            out.update(self.extra)
        return out


ZERO = Resources()


# Sums and differences are built by the hundred thousand in a replay: without the frozen
# dataclass's __init__ (cellstate.fastbuild).
_build = builder(Resources)


def _merge(a: tuple[tuple[str, int], ...], b: tuple[tuple[str, int], ...], sign: int) -> tuple[tuple[str, int], ...]:
    """The extras of the sum (sign 1) or difference (sign -1): sorted, amounts 0 dropped."""
    if not b:
        return a
    if len(a) == len(b):  # mostly the same names (a ledger and a request): pairwise
        out = []
        for (name, x), (other, y) in zip(a, b):
            if name != other:
                break
            total = x + y if sign > 0 else x - y
            if total:
                out.append((name, total))
        else:
            return tuple(out)
    totals = dict(a)
    for key, value in b:
        totals[key] = totals.get(key, 0) + sign * value
    return tuple(sorted((k, v) for k, v in totals.items() if v))
