"""The shape of src/strom and tests/: modules stay small, and a class name means one thing.

Modules are split by state or by API before they grow into god classes (style.md, 9), test
modules by topic; two classes with one name make every import and every log line ambiguous.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "strom"
MODULES = sorted(SRC.rglob("*.py"))
TESTS = ROOT / "tests"
TEST_MODULES = sorted(TESTS.rglob("*.py"))

MAX_LINES = 600

# Class names that two modules define for the same concept in layers that must not
# share code; each entry says why both exist.
SHARED_CLASS_NAMES: dict[str, str] = {
    "TopicPartition": (
        "a topic and a partition index: a frozen dataclass in group/state.py, a NamedTuple "
        "(sortable, printable as topic-partition) in the Spark connector's spark/offsets.py"
    ),
    "BrokerError": (
        "a request the broker refused: strom.client's carries the error code; strom.spark's "
        "is the connector's public exception (user code catches it by that name)"
    ),
}


def _relative(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


@pytest.mark.parametrize("path", MODULES, ids=_relative)
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{_relative(path)} has {lines} lines, more than {MAX_LINES}: split it"
    )


def _test_relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", TEST_MODULES, ids=_test_relative)
def test_test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{_test_relative(path)} has {lines} lines, more than {MAX_LINES}: split it by topic, "
        "shared helpers into a helper module or the directory's conftest.py"
    )


def test_each_class_name_is_defined_once() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined[node.name].append(f"{_relative(path)}:{node.lineno}")
    twice = {
        name: places
        for name, places in sorted(defined.items())
        if len(places) > 1 and name not in SHARED_CLASS_NAMES
    }
    assert not twice, "classes defined more than once: " + "; ".join(
        f"{name} in {', '.join(places)}" for name, places in twice.items()
    )
    for name in SHARED_CLASS_NAMES:
        assert len(defined[name]) > 1, f"{name} is defined once now: remove it from the list"


def test_test_module_names_are_unique() -> None:
    """The test directories are not packages, so pytest imports each test module by its
    file name alone: two with one name stop the whole suite at collection."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in [*TEST_MODULES, *sorted((ROOT / "examples").rglob("*.py"))]:
        if path.name.startswith("test_"):
            by_name[path.name].append(_test_relative(path))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
