"""No module of the four packages is longer than ``MAX_LINES`` (docs/LAYERS.md, "Families as
folders"): a module that grows past it is split along its seams into a family folder."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cellstate", "omega", "schedulers", "tools")
MAX_LINES = 500


def long_modules(root: Path = ROOT, packages=PACKAGES, limit: int = MAX_LINES) -> list[str]:
    """``path: lines`` of every module of ``packages`` under ``root`` longer than ``limit``."""
    out = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > limit:
                out.append(f"{path.relative_to(root)}: {lines}")
    return out


def test_no_module_is_over_the_limit():
    assert not long_modules(), f"modules over {MAX_LINES} lines:\n" + "\n".join(long_modules())


def test_the_check_sees_a_long_module(tmp_path):
    (tmp_path / "omega").mkdir()
    (tmp_path / "omega" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "omega" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_modules(tmp_path, ("omega",)) == [f"omega/long.py: {MAX_LINES + 1}"]
