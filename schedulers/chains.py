"""The scheduler kinds: ``KINDS`` (kind -> ``Kind``: its factory and its retry attempts, filled by
``register_kind``; the built-in
kinds batch, service, borg, solver and easy are registered here) and ``make_scheduler``, which
builds a scheduler from a kind, a name, a seed and a config, and ``retry_policy_for``, its
kind's ``RetryPolicy`` (the hosts hand it to the placer; the core keeps no kind table). Each built-in kind's default chain is wired in
``schedulers.chain_spec`` (re-exported here: ``batch_pipeline``, ``service_pipeline``,
``borg_pipeline``). Nothing in ``schedulers`` imports this module but ``chain_config`` and
``api`` (docs/LAYERS.md).

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
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from omega.retry import RetryPolicy
from schedulers.base import Scheduler
from schedulers.batch import BatchScheduler
from schedulers.borg.scheduler import BorgScheduler
from schedulers.easy.scheduler import EasyScheduler
from schedulers.chain_spec import ChainConfig, batch_pipeline, borg_pipeline, parse_chain, service_pipeline
from schedulers.pipeline import Pipeline
from schedulers.plugin import PluginConfigError
from schedulers.service.scheduler import ServiceScheduler

__all__ = ["KINDS", "Kind", "KindFactory", "batch_pipeline", "borg_pipeline", "make_scheduler", "register_kind",
           "retry_policy_for", "service_pipeline"]

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
    """CP-SAT over a batch of tasks; config keys: ``schedulers/solver/config.py``. Imported
    here, not at the top: OR-tools (and the pandas it loads) is the optional ``solver`` extra,
    loaded only when a solver scheduler is made; without it, a one-line PluginConfigError."""
    try:
        from schedulers.solver.scheduler import SolverScheduler
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in ("ortools", "pandas"):
            raise
        raise SolverUnavailable(f"solver: the solver scheduler needs OR-tools ({missing} is not installed): "
                                "pip install 'omega-scheduler[solver]'") from None
    return SolverScheduler(name, seed, config)


def _make_easy(name: str, seed: int, config: Mapping[str, Any]) -> Scheduler:
    """FCFS with EASY backfilling (docs/EASY.md); no config keys, deterministic: seed unused."""
    if not isinstance(config, Mapping) or config:
        raise PluginConfigError(f"easy: takes no config keys, got {config!r}")
    return EasyScheduler(name)


class SolverUnavailable(PluginConfigError):
    """The solver kind was asked for without its optional dependencies (the ``solver`` extra)."""


KindFactory = Callable[[str, int, Mapping[str, Any]], Scheduler]
"""``factory(name, seed, config)``: a scheduler of one kind (``config``: the kind's own keys)."""



@dataclass(frozen=True, slots=True)
class Kind:
    """A registered scheduler kind: its factory and the attempts without progress after which
    the optimistic loop of its schedulers gives a job up."""

    factory: KindFactory
    retry_attempts: int


KINDS: dict[str, Kind] = {}
"""Scheduler kind -> ``Kind``; filled by ``register_kind`` (read it, do not write it). The one
registry of kinds: the public extension API adds to it (plugins register on import), and it
holds what a kind is, never how one run is configured."""


def register_kind(kind: str, factory: KindFactory, *, retry_attempts: int = 5, replace: bool = False) -> None:
    """Make ``kind`` a scheduler kind: ``make_scheduler(kind, name, seed, config)`` calls
    ``factory(name, seed, config)`` (config: a mapping, ``{}`` when none was given), and the
    optimistic loop of its schedulers gives a job up after ``retry_attempts`` attempts in a
    row without progress (``retry_policy_for``). A kind is a name without "/"
    (it names stats keys and scheduler classes); registering a known kind again is an error
    unless ``replace``. The public entry point is ``schedulers.api.register_kind``."""
    if not isinstance(kind, str) or not kind or "/" in kind or kind != kind.strip():
        raise PluginConfigError(f'scheduler kind must be a non-empty name without "/" or spaces, got {kind!r}')
    if not callable(factory):
        raise PluginConfigError(f"scheduler kind {kind!r}: factory must be callable, got {factory!r}")
    if type(retry_attempts) is not int or retry_attempts < 1:
        raise PluginConfigError(f"scheduler kind {kind!r}: retry attempts must be an int >= 1, got {retry_attempts!r}")
    known = KINDS.get(kind)
    if known is not None and not replace and known.factory is not factory:
        raise PluginConfigError(f"scheduler kind {kind!r} is already registered (pass replace=True to replace it)")
    KINDS[kind] = Kind(factory, retry_attempts)


# Batch jobs are cheap to re-queue and many: give up sooner. Services are few and matter:
# try harder. The Borg-style scheduler places both.
register_kind("batch", _make_batch, retry_attempts=3)
register_kind("service", _make_service, retry_attempts=8)
register_kind("borg", _make_borg, retry_attempts=5)
register_kind("solver", _make_solver, retry_attempts=5)
register_kind("easy", _make_easy, retry_attempts=3)


def make_scheduler(kind: str, name: str, seed: int, config: Mapping[str, Any] | None = None) -> Scheduler:
    """A scheduler of ``kind`` (one of KINDS: built in or registered) called ``name``;
    randomness seeded by ``seed``."""
    known = _kind(kind)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise PluginConfigError(f"{kind}: seed must be an int, got {seed!r}")
    scheduler = known.factory(name, seed, config or {})
    missing = [member for member in _SCHEDULER_MEMBERS if not hasattr(scheduler, member)]
    if missing:
        raise PluginConfigError(f"scheduler kind {kind!r}: its factory made {type(scheduler).__name__}, which lacks "
                                f"{', '.join(missing)} (a scheduler declares name, kind, decide and attach; "
                                "attach = schedulers.api.needs_nothing when it needs nothing of its host)")
    return scheduler


_SCHEDULER_MEMBERS = ("name", "kind", "decide", "attach")
"""What ``schedulers.base.Scheduler`` declares: checked once on what a kind's factory makes."""


def retry_policy_for(kind: str, seed: int | None = 0) -> RetryPolicy:
    """The default retry policy of scheduler ``kind``: its registered attempts, waits drawn
    from a generator seeded by ``seed``. PluginConfigError for an unknown kind."""
    return RetryPolicy(max_attempts=_kind(kind).retry_attempts, seed=seed)


def _kind(kind: str) -> Kind:
    known = KINDS.get(str(kind))
    if known is None:
        raise PluginConfigError(f"unknown scheduler kind {kind!r}; known: {sorted(KINDS)}")
    return known
