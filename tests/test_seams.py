"""Declared seams (issue 33 item 3): the gang strategy and the gang committer use public
methods only, the Borg walk writes its explicit search state and never the scheduler, and the
modules along these seams stay under 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_ONLY = ("omega/gangs.py", "cellstate/gang_commit.py", "schedulers/borg/search.py",
               "schedulers/borg/decision.py", "schedulers/plugins/preemption.py")
SIZED = ("omega/occ.py", "omega/gangs.py", "omega/placement.py", "omega/attempts.py",
         "cellstate/committer.py", "cellstate/gang_commit.py", "cellstate/plan_rules.py",
         "schedulers/pipeline.py", "schedulers/plugins/preemption.py") + tuple(
    str(p.relative_to(ROOT)) for p in sorted((ROOT / "schedulers" / "borg").glob("*.py")))


def _private_uses(tree: ast.AST) -> list[str]:
    """``x._name`` for any ``x`` but ``self`` (dunders aside), as ``line: x._name``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", PUBLIC_ONLY)
def test_uses_no_private_attribute_of_another_object(path):
    assert _private_uses(ast.parse((ROOT / path).read_text())) == []


def test_the_check_finds_a_private_call():
    assert _private_uses(ast.parse("placer._decide(st)\nself._own()\n")) == ["1: placer._decide"]


def _scheduler_writes(tree: ast.AST) -> list[str]:
    """Assignments to an attribute of ``sched`` or ``….sched``."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute):
                owner = target.value
                if (isinstance(owner, ast.Name) and owner.id == "sched") or \
                        (isinstance(owner, ast.Attribute) and owner.attr == "sched"):
                    found.append(f"{node.lineno}: {ast.unparse(target)}")
    return found


@pytest.mark.parametrize("path", ["schedulers/borg/search.py", "schedulers/borg/decision.py"])
def test_the_borg_walk_writes_no_scheduler_attribute(path):
    assert _scheduler_writes(ast.parse((ROOT / path).read_text())) == []


def test_the_write_check_finds_one():
    assert _scheduler_writes(ast.parse("d.sched._count = -1\nsched.sticky += 1\nstate.count = -1\n")) == [
        "1: d.sched._count", "2: sched.sticky"]


@pytest.mark.parametrize("path", SIZED)
def test_module_under_500_lines(path):
    lines = len((ROOT / path).read_text().splitlines())
    assert lines <= 500, f"{path} has {lines} lines"
