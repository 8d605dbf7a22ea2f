"""Shared arithmetic of the packing scorers: the fraction of each resource a machine would
have left after taking one more task, and the resources-args validation they share."""

from __future__ import annotations

from cellstate.model import Machine
from cellstate.resources import Resources
from schedulers.plugin import PluginConfigError


def checked_resources(plugin: str, names) -> tuple[str, ...]:
    """``names`` as a non-empty tuple of resource names; PluginConfigError naming ``plugin``."""
    if isinstance(names, str) or not names or not all(isinstance(n, str) and n for n in names):
        raise PluginConfigError(f"{plugin}: resources must be a non-empty list of names, got {names!r}")
    return tuple(names)


def left_fractions(machine: Machine, free: Resources, request: Resources,
                   names: tuple[str, ...]) -> list[float]:
    """Per resource in ``names`` the machine has capacity of: (free - request) / capacity,
    clamped to [0, 1]. Resources the machine has none of are left out."""
    out = []
    capacity = machine.capacity
    for name in names:
        cap = capacity.get(name)
        if cap <= 0:
            continue
        left = (free.get(name) - request.get(name)) / cap
        out.append(0.0 if left < 0.0 else (1.0 if left > 1.0 else left))
    return out
