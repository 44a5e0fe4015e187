"""The package's floors: every import runs down (mialab.FLOORS), none up, none across a floor."""

from __future__ import annotations

import ast
from pathlib import Path

import mialab

ROOT = Path(mialab.__file__).parent
FLOOR = {pkg: i for i, floor in enumerate(mialab.FLOORS) for pkg in floor}


def imported_modules(path: Path) -> set[str]:
    """Every mialab module ``path`` imports, at module level or inside a function."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: relative import (write mialab.<floor>...)")
    return {m for m in found if m == "mialab" or m.startswith("mialab.")}


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_package_has_a_floor():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(FLOOR), f"packages without a floor: {packages - set(FLOOR)}; gone: {set(FLOOR) - packages}"
    assert not [p.name for p in ROOT.glob("*.py") if p.name != "__init__.py"], "top-level modules belong in a floor"


def test_imports_run_only_down():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        own = package_of(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
        if own is None:
            continue
        for module in imported_modules(path):
            target = package_of(module)
            if target is None:
                upward.append(f"{path.relative_to(ROOT.parent)} imports the top-level package {module}")
            elif target != own and FLOOR[target] >= FLOOR[own]:
                upward.append(f"{path.relative_to(ROOT.parent)} ({own}, floor {FLOOR[own]}) imports {module} "
                              f"({target}, floor {FLOOR[target]})")
    assert not upward, "imports that do not run down:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path):
    """The walker finds imports inside functions too (a lazy import is still an arrow)."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from mialab.adra.plan import ADRAPlan\n")
    assert imported_modules(module) == {"mialab.adra.plan"}
