"""Each scheduler kind's chain of plugins, wired in one function with a comment per stage,
and ``make_scheduler``, which builds a scheduler from a kind, a name, a seed and a config.

Config keys: ``plugins`` maps a plugin name of the chain to its args (a dict of its args
dataclass fields); batch also takes ``k``, ``sample_size``, ``sample_rounds``.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

from schedulers.base import Scheduler
from schedulers.batch import BatchScheduler
from schedulers.pipeline import Pipeline
from schedulers.plugin import PluginConfigError
from schedulers.registry import make_filter, make_scorer
from schedulers.service import ServiceScheduler

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


def _check_plugin_names(plugins: Mapping[str, Any], chain: tuple[str, ...], kind: str) -> None:
    if not isinstance(plugins, Mapping):
        raise PluginConfigError(f"{kind}: 'plugins' must map plugin names to args, got {plugins!r}")
    unknown = sorted(set(plugins) - set(chain))
    if unknown:
        raise PluginConfigError(f"{kind}: plugins {unknown} are not in the chain {list(chain)}")


def _split(config: Mapping[str, Any], allowed: tuple[str, ...], kind: str) -> tuple[dict, dict]:
    if not isinstance(config, Mapping):
        raise PluginConfigError(f"{kind}: config must be a mapping, got {config!r}")
    unknown = sorted(set(config) - set(allowed) - {"plugins"})
    if unknown:
        raise PluginConfigError(f"{kind}: unknown config keys {unknown}; known: {sorted(allowed + ('plugins',))}")
    return dict(config.get("plugins") or {}), {k: config[k] for k in allowed if k in config}


def _make_batch(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    plugins, knobs = _split(config, ("k", "sample_size", "sample_rounds"), "batch")
    return BatchScheduler(name, random.Random(seed), pipeline=batch_pipeline(plugins), **knobs)


def _make_service(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    plugins, _ = _split(config, (), "service")
    return ServiceScheduler(name, pipeline=service_pipeline(plugins))  # deterministic: seed unused


KINDS: dict[str, Callable[[str, int, Mapping[str, Any]], Scheduler]] = {
    "batch": _make_batch,
    "service": _make_service,
}


def make_scheduler(kind: str, name: str, seed: int, config: Mapping[str, Any] | None = None) -> Scheduler:
    """A scheduler of ``kind`` (one of KINDS) called ``name``; randomness seeded by ``seed``."""
    maker = KINDS.get(str(kind))
    if maker is None:
        raise PluginConfigError(f"unknown scheduler kind {kind!r}; known: {sorted(KINDS)}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise PluginConfigError(f"{kind}: seed must be an int, got {seed!r}")
    return maker(name, seed, config or {})
