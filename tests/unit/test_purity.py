"""The cores stay pure: no asyncio, socket, clock, threads or global randomness.

Cores take `now_ms` and a seeded `random.Random`; only `from random import Random` is
allowed. The store adapters under metadata/stores are the shell's and may do I/O.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "strom"
FORBIDDEN = {"asyncio", "socket", "time", "random", "threading"}
CORES = ("protocol", "log", "metadata", "config", "replication", "raft", "group")
MODULES = sorted(
    path
    for core in CORES
    for path in (SRC / core).rglob("*.py")
    if "stores" not in path.relative_to(SRC).parts
)


def _impure_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            if root == "random" and all(alias.name == "Random" for alias in node.names):
                continue
            imported.add(root)
    return imported & FORBIDDEN


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_core_module_imports_nothing_impure(path: Path) -> None:
    assert not _impure_imports(path)


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_modules_stay_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 650
