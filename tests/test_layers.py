"""The layer rule of docs/LAYERS.md, checked on the source: every import of every module of
``cellstate``, ``omega``, ``schedulers`` and ``tools`` (module level, in functions, under
``TYPE_CHECKING``, and ``importlib.import_module("literal")``) must point down or sideways
within its layer, and the packages declared cycle-free must have no import cycle.

Layers, lowest first (a module may import its own layer and the layers below it, not the
layers beside or above it):

    model     cellstate.fastbuild, cellstate.resources, cellstate.model, cellstate.devices,
              cellstate.plan, cellstate.scheduler_stats
    state     the rest of cellstate                   (stores, codecs, replica, committer, ...)
    core      omega                                   (model only below it; no etcd, grpc, rich, msgpack)
    policies  schedulers                              (beside state: neither imports the other)
    tools     tools                                   (the command line, fauxmaster, agents, ...)

So the folders are layers too: ``cellstate`` (model and state) never imports ``omega``, and
within ``tools`` only the command line (``tools.cli``) imports the command line: the libraries
(fauxmaster, traces, sweep, metrics, ...) are usable without it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cellstate", "omega", "schedulers", "tools")

MODEL = frozenset({"cellstate.fastbuild", "cellstate.resources", "cellstate.model", "cellstate.devices",
                   "cellstate.plan", "cellstate.scheduler_stats"})
LAYERS = ("model", "state", "core", "policies", "tools")
MAY_IMPORT = {  # layer -> the layers its modules may import (besides third-party modules)
    "model": {"model"},
    "state": {"model", "state"},
    "core": {"model", "core"},
    "policies": {"model", "core", "policies"},
    "tools": set(LAYERS),
}
FORBIDDEN_THIRD_PARTY = {"core": ("etcd3", "grpc", "rich", "msgpack")}
ACYCLIC = ("omega", "schedulers", "cellstate")
"""Packages whose modules may not import each other in a circle (imports under
``TYPE_CHECKING`` are left out: they never run, and type-only references in both
directions are normal)."""


def layer_of(module: str) -> str:
    if module in MODEL:
        return "model"
    top = module.split(".")[0]
    return {"omega": "core", "cellstate": "state", "schedulers": "policies", "tools": "tools"}[top]


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported module (or top-level name of a third-party one)
    line: int
    typing_only: bool


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    return {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(name: str, modules: dict[str, Path]) -> str:
    """The module ``name`` is (or is in): its longest prefix that is a known module; a
    third-party name as its top-level package."""
    probe = name
    while probe:
        if probe in modules:
            return probe
        probe = probe.rpartition(".")[0]
    return name.split(".")[0]


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    out: list[Import] = []

    def add(name: str, line: int, typing_only: bool) -> None:
        target = _resolve(name, modules)
        if target != module:
            out.append(Import(module, target, line, typing_only))

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, typing_only)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[:len(base) - node.level + (1 if is_package else 0)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for alias in node.names:  # ``from pkg import module`` imports that module
                full = f"{name}.{alias.name}"
                add(full if full in modules else name, node.lineno, typing_only)
        elif isinstance(node, ast.Call) and _literal_import_module(node):
            add(node.args[0].value, node.lineno, typing_only)
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return out


def _literal_import_module(node: ast.Call) -> bool:
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")
    return named and len(node.args) >= 1 and isinstance(node.args[0], ast.Constant) \
        and isinstance(node.args[0].value, str)


def all_imports(root: Path, packages=PACKAGES) -> tuple[dict[str, Path], list[Import]]:
    modules = find_modules(root, packages)
    return modules, [imp for module, path in modules.items() for imp in imports_of(module, path, modules)]


def layer_violations(modules: dict[str, Path], imports: list[Import]) -> list[str]:
    """One line per import against the layer order (or of a third-party module a layer
    may not use)."""
    out = []
    for imp in imports:
        src_layer = layer_of(imp.source)
        where = f"{modules[imp.source].relative_to(ROOT) if modules[imp.source].is_relative_to(ROOT) else imp.source}:{imp.line}"
        if imp.target in modules:
            dst_layer = layer_of(imp.target)
            if dst_layer not in MAY_IMPORT[src_layer]:
                out.append(f"{where}: {imp.source} ({src_layer}) imports {imp.target} ({dst_layer})")
            elif _is_cli(imp.target) and not _is_cli(imp.source):
                out.append(f"{where}: {imp.source} (a tools library) imports {imp.target} (the command line)")
        elif imp.target in FORBIDDEN_THIRD_PARTY.get(src_layer, ()):
            out.append(f"{where}: {imp.source} ({src_layer}) imports {imp.target}")
    return out


def _is_cli(module: str) -> bool:
    return module == "tools.cli" or module.startswith("tools.cli.")


def cycles(modules: dict[str, Path], imports: list[Import], packages=ACYCLIC) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module) among the
    modules of each of ``packages``, run-time imports only."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if not imp.typing_only and imp.target in modules \
                and imp.source.split(".")[0] == imp.target.split(".")[0] in packages:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:  # Tarjan, iterative over the edges of one node at a time
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        while work:
            node, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_imports_follow_the_layers():
    modules, imports = all_imports(ROOT)
    assert len(modules) > 100 and len(imports) > 500  # the scan saw the code
    violations = layer_violations(modules, imports)
    assert not violations, "imports against docs/LAYERS.md:\n" + "\n".join(violations)


def test_no_import_cycles():
    modules, imports = all_imports(ROOT)
    found = cycles(modules, imports)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# -- the checker itself: a tree with a bad arrow and a circle ------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    return tmp_path


def test_checker_finds_an_upward_import_in_a_function(tmp_path):
    root = _tree(tmp_path, {
        "omega/core.py": "def f():\n    from schedulers.chains import KINDS\n    return KINDS\n",
        "schedulers/chains.py": "from omega.core import f\n",
        "cellstate/model.py": "import msgpack\n",
        "omega/wire.py": "import importlib\nimportlib.import_module('cellstate.store')\nimport rich.console\n",
        "cellstate/store.py": "",
        "cellstate/committer.py": "from omega.core import f\n",
        "tools/cli/__init__.py": "",
        "tools/cli/flags.py": "",
        "tools/report.py": "from tools.cli.flags import *\n",
    })
    modules, imports = all_imports(root)
    violations = layer_violations(modules, imports)
    assert any("omega.core (core) imports schedulers.chains (policies)" in v for v in violations), violations
    assert any("omega.wire (core) imports cellstate.store (state)" in v for v in violations), violations
    assert any("omega.wire (core) imports rich" in v for v in violations), violations
    assert any("cellstate.committer (state) imports omega.core (core)" in v for v in violations), violations
    assert any("tools.report (a tools library) imports tools.cli.flags (the command line)" in v
               for v in violations), violations
    assert not any("cellstate.model" in v for v in violations)  # msgpack is only barred from the core


def test_checker_finds_a_cycle_but_not_a_typing_only_one(tmp_path):
    root = _tree(tmp_path, {
        "schedulers/a.py": "from schedulers import b\n",
        "schedulers/b.py": "def f():\n    import schedulers.a\n",
        "schedulers/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from schedulers.d import D\n",
        "schedulers/d.py": "from schedulers.c import *\n",
    })
    modules, imports = all_imports(root)
    assert cycles(modules, imports) == [["schedulers.a", "schedulers.b"]]


@pytest.mark.parametrize("module,layer", [("cellstate.model", "model"), ("omega.occ", "core"),
                                          ("cellstate.committer", "state"), ("schedulers.chains", "policies"),
                                          ("tools.cli", "tools")])
def test_layer_of(module, layer):
    assert layer_of(module) == layer


def test_core_names_no_scheduler_kind():
    """Scheduler kinds are the policy layer's (``schedulers.chains.register_kind``): no string
    constant of ``omega`` (docstrings aside) is the name of a built-in kind."""
    from schedulers.chains import KINDS

    named = []
    for module, path in find_modules(ROOT, ("omega",)).items():
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        named += [f"{module}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in KINDS and id(node) not in docstrings]
    assert not named, "scheduler kinds named in omega/:\n" + "\n".join(named)
