"""The flat plugin registry: name -> factory(args: args dataclass | dict | None).

The built-in plugins are listed here; ``register_filter``/``register_scorer`` add others
(public: ``schedulers.api``), after which chains name them like the built-in ones."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from schedulers.plugin import Filter, PluginConfigError, Scorer
from schedulers.plugins import (
    best_fit,
    borg_hybrid,
    constraints,
    different_machine,
    domain_spread,
    fgd,
    gpu_policies,
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
    fgd.NAME: fgd.factory,
    **gpu_policies.FACTORIES,
}


def register_filter(name: str, factory: Callable[..., Filter], *, replace: bool = False) -> None:
    """Make ``name`` a filter of chains: ``factory(args)`` builds it (args: a mapping of its
    args, None for defaults, or its args object)."""
    _register(FILTERS, "filter", name, factory, replace)


def register_scorer(name: str, factory: Callable[..., Scorer], *, replace: bool = False) -> None:
    """Make ``name`` a scorer of chains (see ``register_filter``)."""
    _register(SCORERS, "scorer", name, factory, replace)


def _register(table: dict[str, Callable[..., Any]], what: str, name: str, factory, replace: bool) -> None:
    if not isinstance(name, str) or not name or name != name.strip():
        raise PluginConfigError(f"{what} name must be a non-empty string without surrounding spaces, got {name!r}")
    if not callable(factory):
        raise PluginConfigError(f"{what} {name!r}: factory must be callable, got {factory!r}")
    if name in FILTERS.keys() | SCORERS.keys() and not replace and table.get(name) is not factory:
        raise PluginConfigError(f"plugin {name!r} is already registered (pass replace=True to replace it)")
    table[name] = factory


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
