"""Each scheduler kind's chain of plugins, wired in one function with a comment per stage,
and ``make_scheduler``, which builds a scheduler from a kind, a name, a seed and a config.

Config keys: ``plugins`` maps a plugin name of the chain to its args (a dict of its args
dataclass fields); batch also takes ``k``, ``sample_size``, ``sample_rounds``. Any kind
also takes ``chain`` (a ``chain_config.ChainConfig``) or ``filters``/``scorers`` (lists as in
``schedulers/default_chains.toml``), which replace the default chain (then ``plugins`` is
not allowed). borg takes the options of ``BorgScheduler`` (``k``, ``equivalence_classes``,
``score_cache``, ``relaxed_randomization``, ``preemption``, ``cache_entries``, ``serves``,
``walk_start``, ``sweep``, ``prove``).
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

from schedulers.base import Scheduler
from schedulers.batch import BatchScheduler
from schedulers.borg import BorgScheduler
from schedulers.pipeline import Pipeline
from schedulers.plugin import PluginConfigError
from schedulers.registry import make_filter, make_scorer
from schedulers.service import ServiceScheduler
from schedulers.solver import SolverScheduler

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
    from schedulers.chain_config import default_chain

    return default_chain("borg").pipeline()


def _check_plugin_names(plugins: Mapping[str, Any], chain: tuple[str, ...], kind: str) -> None:
    if not isinstance(plugins, Mapping):
        raise PluginConfigError(f"{kind}: 'plugins' must map plugin names to args, got {plugins!r}")
    unknown = sorted(set(plugins) - set(chain))
    if unknown:
        raise PluginConfigError(f"{kind}: plugins {unknown} are not in the chain {list(chain)}")


_CHAIN_KEYS = ("plugins", "chain", "filters", "scorers")


def _split(config: Mapping[str, Any], allowed: tuple[str, ...], kind: str) -> tuple[dict, dict]:
    if not isinstance(config, Mapping):
        raise PluginConfigError(f"{kind}: config must be a mapping, got {config!r}")
    unknown = sorted(set(config) - set(allowed) - set(_CHAIN_KEYS))
    if unknown:
        raise PluginConfigError(f"{kind}: unknown config keys {unknown}; known: {sorted(allowed + _CHAIN_KEYS)}")
    return dict(config.get("plugins") or {}), {k: config[k] for k in allowed if k in config}


def _configured_pipeline(config: Mapping[str, Any], kind: str) -> Pipeline | None:
    """The pipeline of a ``chain`` or ``filters``/``scorers`` config entry (None: default chain)."""
    from schedulers.chain_config import ChainConfig, parse_chain

    given = [key for key in _CHAIN_KEYS if key in config]
    if not set(given) - {"plugins"}:
        return None
    if "plugins" in given or ("chain" in given and len(given) > 1):
        raise PluginConfigError(f"{kind}: give either chain, filters/scorers or plugins, not {given}")
    chain = config.get("chain")
    if chain is None:
        chain = parse_chain(config, kind)
    if not isinstance(chain, ChainConfig):
        raise PluginConfigError(f"{kind}: chain must be a ChainConfig, got {chain!r}")
    return chain.pipeline()


def _make_batch(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    plugins, knobs = _split(config, ("k", "sample_size", "sample_rounds"), "batch")
    pipeline = _configured_pipeline(config, "batch") or batch_pipeline(plugins)
    return BatchScheduler(name, random.Random(seed), pipeline=pipeline, **knobs)


def _make_service(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    plugins, _ = _split(config, (), "service")
    pipeline = _configured_pipeline(config, "service") or service_pipeline(plugins)
    return ServiceScheduler(name, pipeline=pipeline)  # deterministic: seed unused


_BORG_OPTIONS = ("k", "equivalence_classes", "score_cache", "relaxed_randomization", "preemption",
                 "cache_entries", "serves", "walk_start", "sweep", "prove")


def _make_borg(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    plugins, knobs = _split(config, _BORG_OPTIONS, "borg")
    if plugins:
        raise PluginConfigError("borg: configure its chain with chain or filters/scorers, not plugins")
    pipeline = _configured_pipeline(config, "borg") or borg_pipeline()
    return BorgScheduler(name, random.Random(seed), pipeline, **knobs)


def _make_solver(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    """CP-SAT over a batch of tasks; config keys: ``schedulers/solver_config.py``."""
    return SolverScheduler(name, seed, config)


KINDS: dict[str, Callable[[str, int, Mapping[str, Any]], Scheduler]] = {
    "batch": _make_batch,
    "service": _make_service,
    "borg": _make_borg,
    "solver": _make_solver,
}


def make_scheduler(kind: str, name: str, seed: int, config: Mapping[str, Any] | None = None) -> Scheduler:
    """A scheduler of ``kind`` (one of KINDS) called ``name``; randomness seeded by ``seed``."""
    maker = KINDS.get(str(kind))
    if maker is None:
        raise PluginConfigError(f"unknown scheduler kind {kind!r}; known: {sorted(KINDS)}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise PluginConfigError(f"{kind}: seed must be an int, got {seed!r}")
    return maker(name, seed, config or {})
