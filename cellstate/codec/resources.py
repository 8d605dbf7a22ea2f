"""Resource vectors in the codec's map form ``{"cpu", "memory", "disk", <extra names>…}``.

Decoding is strict (non-negative ints, non-empty names; ``CodecError`` naming
``field.<name>``). Core-only vectors, the common case, come from a bounded cache of shared
instances (``core_resources``): a cell's requests, capacities and ledgers repeat a few.
"""

from __future__ import annotations

from cellstate.codec import fields as fc
from cellstate.fastbuild import builder
from cellstate.resources import CORE_NAMES, Resources

_RESOURCES = builder(Resources)


def encode_resources(r: Resources) -> dict:
    """The map form of a resource vector: core names always, extras by name."""
    return r.to_dict()


def resources_from_map(m, key: str = "resources", field: str = "resources") -> Resources:
    """A validated Resources from its map form; missing core names count as 0,
    extras with amount 0 are dropped. Raises CodecError naming ``field.<name>``."""
    if type(m) is dict and len(m) == 3:
        try:
            cpu, memory, disk = m["cpu"], m["memory"], m["disk"]
        except KeyError:
            return _resources_general(m, key, field)
        if (type(cpu) is int and cpu >= 0 and type(memory) is int and memory >= 0
                and type(disk) is int and disk >= 0):
            return core_resources(cpu, memory, disk)
    return _resources_general(m, key, field)


_INTERNED: dict[tuple[int, int, int], Resources] = {}
_INTERNED_MAX = 1 << 16


def core_resources(cpu: int, memory: int, disk: int) -> Resources:
    """The (shared, immutable) vector of these core amounts, from a bounded cache: a cell's
    requests, capacities and ledgers repeat a few vectors, and building one costs more
    than looking it up. The caller has checked the amounts (non-negative ints)."""
    key = (cpu, memory, disk)
    found = _INTERNED.get(key)
    if found is None:
        if len(_INTERNED) >= _INTERNED_MAX:
            _INTERNED.clear()
        found = _INTERNED[key] = _RESOURCES(cpu, memory, disk, ())
    return found


def _resources_general(m, key: str, field: str) -> Resources:
    fc.mapping(key, field, m)
    core = [0, 0, 0]
    extra = []
    for name, amount in m.items():
        if type(name) is not str or not name:
            raise fc.expected(key, field, "resource names that are non-empty strings", name)
        fc.integer(key, f"{field}.{name}", amount)
        if name in CORE_NAMES:
            core[CORE_NAMES.index(name)] = amount
        elif amount:
            extra.append((name, amount))
    extra.sort()
    return Resources(core[0], core[1], core[2], tuple(extra))
