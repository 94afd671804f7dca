"""The log and record cores stay pure: no asyncio, socket, clock or global randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src" / "strom"
FORBIDDEN = {"asyncio", "socket", "time", "random", "threading"}
MODULES = [*sorted((SRC / "log").glob("*.py")), SRC / "protocol" / "records.py"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_modules_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 650
