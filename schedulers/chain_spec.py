"""Chains from configuration: which plugins, in which order, with which weights and args,
and the built-in kinds' default chains.

A chain is ``filters`` (run in order, cheapest first; the first failure decides) and
``scorers`` (each with a ``weight`` > 0 and a ``stage`` >= 0: scorers of one stage form a
weighted mean normalized to [0, 1]; stages compare lexicographically, lowest stage first).
``schedulers.chain_config.load_chain_config(path)`` reads a TOML file of scheduler tables
(see ``schedulers/default_chains.toml``); every error names the file, the table, the entry,
the plugin and the field.

This module is the lower half of the chain configuration: it knows plugins (the registry),
never scheduler kinds, so the schedulers may take their default chains from it
(``batch_pipeline``, ``service_pipeline``, ``borg_pipeline``). Chain files that name kinds
(``load_chain_config``) are read by ``schedulers.chain_config``, above the kinds.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Mapping

from schedulers.pipeline import Pipeline
from schedulers.plugin import PluginConfigError
from schedulers.registry import FILTERS, SCORERS, make_filter, make_scorer

DEFAULT_CHAINS = Path(__file__).with_name("default_chains.toml")
_FILTER_KEYS = frozenset({"name", "args"})
_SCORER_KEYS = frozenset({"name", "args", "weight", "stage"})


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """One plugin of a chain: its registry name, args (fields of its args dataclass),
    and for a scorer its weight and ranking stage."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    stage: int = 0


@dataclass(frozen=True, slots=True)
class ChainConfig:
    """Filters in order and weighted scorers; ``pipeline()`` builds the plugins."""

    filters: tuple[PluginSpec, ...]
    scorers: tuple[PluginSpec, ...] = ()

    def pipeline(self) -> Pipeline:
        filters = [make_filter(spec.name, dict(spec.args)) for spec in self.filters]
        stages: dict[int, list] = {}
        for spec in self.scorers:
            stages.setdefault(spec.stage, []).append((make_scorer(spec.name, dict(spec.args)), spec.weight))
        return Pipeline(filters, [stages[s] for s in sorted(stages)])


def parse_chain(raw: Mapping[str, Any], where: str) -> ChainConfig:
    """A validated ChainConfig from ``{"filters": [...], "scorers": [...]}``; every plugin is
    built once so bad args fail here. ``where`` prefixes error messages."""
    filters = _plugin_list(raw.get("filters"), "filters", FILTERS, _FILTER_KEYS, where)
    if not filters:
        raise PluginConfigError(f"{where}: filters: a chain needs at least one filter")
    scorers = _plugin_list(raw.get("scorers", []), "scorers", SCORERS, _SCORER_KEYS, where)
    chain = ChainConfig(tuple(filters), tuple(scorers))
    try:
        chain.pipeline()
    except PluginConfigError as err:
        raise PluginConfigError(f"{where}: {err}") from None
    return chain


def _plugin_list(raw: Any, what: str, table: Mapping, keys: frozenset[str], where: str) -> list[PluginSpec]:
    if not isinstance(raw, list):
        raise PluginConfigError(f"{where}: {what} must be a list of plugin tables, got {raw!r}")
    specs, seen = [], set()
    for i, entry in enumerate(raw):
        at = f"{where}: {what}[{i}]"
        spec = _plugin_spec(entry, at, table, keys)
        if spec.name in seen:
            raise PluginConfigError(f"{at} ({spec.name}): listed twice")
        seen.add(spec.name)
        specs.append(spec)
    return specs


def _plugin_spec(entry: Any, at: str, table: Mapping, keys: frozenset[str]) -> PluginSpec:
    if not isinstance(entry, Mapping) or "name" not in entry:
        raise PluginConfigError(f"{at}: expected a table with a name, got {entry!r}")
    name = entry["name"]
    if name not in table:
        raise PluginConfigError(f"{at}: unknown plugin {name!r}; known: {sorted(table)}")
    unknown = sorted(set(entry) - keys)
    if unknown:
        raise PluginConfigError(f"{at} ({name}): unknown fields {unknown}; known: {sorted(keys)}")
    args = entry.get("args", {})
    if not isinstance(args, Mapping):
        raise PluginConfigError(f"{at} ({name}): args must be a table, got {args!r}")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
        raise PluginConfigError(f"{at} ({name}): weight must be a number > 0, got {weight!r}")
    stage = entry.get("stage", 0)
    if isinstance(stage, bool) or not isinstance(stage, int) or stage < 0:
        raise PluginConfigError(f"{at} ({name}): stage must be an int >= 0, got {stage!r}")
    spec = PluginSpec(name, _tuples(args), float(weight), stage)
    try:
        table[name](dict(spec.args))
    except PluginConfigError as err:
        raise PluginConfigError(f"{at} ({name}): {err}") from None
    return spec


def _tuples(args: Mapping[str, Any]) -> dict[str, Any]:
    """TOML arrays as tuples (the args dataclasses are frozen and hashable)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}


@cache
def default_chain(table: str) -> ChainConfig:
    """The chain of ``table`` in ``schedulers/default_chains.toml``."""
    data = tomllib.loads(DEFAULT_CHAINS.read_text())
    if table not in data:
        raise PluginConfigError(f"{DEFAULT_CHAINS}: no table [{table}]")
    return parse_chain(data[table], f"{DEFAULT_CHAINS}: [{table}]")


# Filters shared by both kinds, cheapest first; a machine is charged to the first that fails.
_FILTERS = (
    "machine_state",      # one enum test: draining/down machines never get new tasks
    "different_machine",  # one int test on placed_here (already counted per machine)
    "max_per_machine",    # likewise
    "resources_fit",      # three integer compares (+ extras): the usual reason in a busy cell
    "constraints",        # loops over the job's constraints and machine labels: last
)


def batch_pipeline(plugins: Mapping[str, Any]) -> Pipeline:
    """Batch: the shared filters; rank the k sampled feasible machines by free resources."""
    _check_plugin_names(plugins, _FILTERS + ("least_loaded",), "batch")
    filters = [make_filter(name, plugins.get(name)) for name in _FILTERS]
    stages = [
        [(make_scorer("least_loaded", plugins.get("least_loaded")), 1.0)],  # the lighter machine wins
    ]
    return Pipeline(filters, stages)


def service_pipeline(plugins: Mapping[str, Any]) -> Pipeline:
    """Service: the shared filters; rank lexicographically — spread first, then load."""
    _check_plugin_names(plugins, _FILTERS + ("zone_spread", "least_loaded"), "service")
    filters = [make_filter(name, plugins.get(name)) for name in _FILTERS]
    stages = [
        [(make_scorer("zone_spread", plugins.get("zone_spread")), 1.0)],    # fewer of the job's tasks
        [(make_scorer("least_loaded", plugins.get("least_loaded")), 1.0)],  # then the lighter machine
    ]
    return Pipeline(filters, stages)


def borg_pipeline() -> Pipeline:
    """Borg: the chain of the [borg] table of schedulers/default_chains.toml, commented there:
    the shared filters; stage 0 priority_aware (no preemption first), stage 1 borg_hybrid
    (packing without stranding, weight 3) + package_locality (weight 1)."""
    return default_chain("borg").pipeline()


def _check_plugin_names(plugins: Mapping[str, Any], chain: tuple[str, ...], kind: str) -> None:
    if not isinstance(plugins, Mapping):
        raise PluginConfigError(f"{kind}: 'plugins' must map plugin names to args, got {plugins!r}")
    unknown = sorted(set(plugins) - set(chain))
    if unknown:
        raise PluginConfigError(f"{kind}: plugins {unknown} are not in the chain {list(chain)}")
