"""A replay's scheduler mix from its text form: a JSON list of scheduler configs (or
``@file.json``), or a comma list of ``NAME:KIND[:CONFLICT_MODE[:COMMIT_MODE]]`` items, e.g.
``b1:batch,b2:batch:sequence,s:service``."""

from __future__ import annotations

import json


def parse_schedulers(spec: str, seed: int = 0, t_job: float | None = None, t_task: float | None = None,
                     order: str | None = None, drf_weights: dict[str, float] | None = None) -> list[dict]:
    """Scheduler config dicts from ``spec`` (see the module docstring); ValueError if malformed.
    ``seed``, ``t_job``, ``t_task``, ``order`` and ``drf_weights`` fill what a config leaves out."""
    spec = spec.strip()
    if spec.startswith("@"):
        with open(spec[1:]) as f:
            spec = f.read().strip()
    if spec.startswith("["):
        configs = json.loads(spec)
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise ValueError("--schedulers JSON must be a list of objects")
    else:
        configs = [_item(item) for item in spec.split(",") if item.strip()]
    for i, config in enumerate(configs):
        config.setdefault("seed", seed + i)
        for key, value in (("t_job", t_job), ("t_task", t_task), ("order", order)):
            if value is not None:
                config.setdefault(key, value)
        if drf_weights and config.get("order") == "drf":
            config.setdefault("drf_weights", drf_weights)
    if drf_weights and not any(config.get("order") == "drf" for config in configs):
        raise ValueError("--drf-weight needs a scheduler with the drf queue order (--order drf)")
    return configs


def _item(item: str) -> dict:
    parts = [p.strip() for p in item.strip().split(":")]
    if len(parts) < 2 or len(parts) > 4 or not all(parts):
        raise ValueError(f"--schedulers item {item!r}: expected NAME:KIND[:CONFLICT_MODE[:COMMIT_MODE]]")
    config = {"name": parts[0], "kind": parts[1]}
    if len(parts) > 2:
        config["conflict_mode"] = parts[2]
    if len(parts) > 3:
        config["commit_mode"] = parts[3]
    return config
