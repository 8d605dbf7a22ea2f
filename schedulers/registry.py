"""The flat plugin registry: name -> factory(args: args dataclass | dict | None)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from schedulers.plugin import Filter, PluginConfigError, Scorer
from schedulers.plugins import (
    best_fit,
    borg_hybrid,
    constraints,
    different_machine,
    domain_spread,
    least_loaded,
    machine_state,
    max_per_machine,
    package_locality,
    priority_aware,
    resources_fit,
    worst_fit,
    zone_spread,
)

FILTERS: dict[str, Callable[..., Filter]] = {
    machine_state.NAME: machine_state.factory,
    constraints.NAME: constraints.factory,
    different_machine.NAME: different_machine.factory,
    max_per_machine.NAME: max_per_machine.factory,
    resources_fit.NAME: resources_fit.factory,
}

SCORERS: dict[str, Callable[..., Scorer]] = {
    least_loaded.NAME: least_loaded.factory,
    zone_spread.NAME: zone_spread.factory,
    best_fit.NAME: best_fit.factory,
    worst_fit.NAME: worst_fit.factory,
    borg_hybrid.NAME: borg_hybrid.factory,
    domain_spread.NAME: domain_spread.factory,
    package_locality.NAME: package_locality.factory,
    priority_aware.NAME: priority_aware.factory,
}


def make_filter(name: str, args: Any = None) -> Filter:
    """The filter registered as ``name``, built with ``args``."""
    return _make(FILTERS, "filter", name, args)


def make_scorer(name: str, args: Any = None) -> Scorer:
    """The scorer registered as ``name``, built with ``args``."""
    return _make(SCORERS, "scorer", name, args)


def _make(table: Mapping[str, Callable[..., Any]], what: str, name: str, args: Any) -> Any:
    factory = table.get(name)
    if factory is None:
        raise PluginConfigError(f"unknown {what} {name!r}; known: {sorted(table)}")
    return factory(args)
