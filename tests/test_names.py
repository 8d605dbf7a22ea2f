"""Every class name is defined once across the packages (a newcomer greps one definition)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cellstate", "omega", "schedulers", "tools")


def test_every_class_name_is_defined_once():
    where = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"class names defined more than once: {twice}"
