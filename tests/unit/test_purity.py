"""The import rules of strom's layers, checked on the graph of its imports.

Every module under src/strom is parsed with `ast`; every import in it counts, wherever
it stands: at the top, inside a function, under `try`, and under `if TYPE_CHECKING:`.
Imports for type checking count on purpose: a type a module names in its signatures is a
dependency of its package as much as a runtime import is, and a core whose API mentions
`asyncio` or `strom.server` types is no longer a pure core. Relative imports (`from . import
x`, `from ..log import y`) are resolved to the modules they name.

The rules:

- The cores (`protocol`, `log`, `replication`, `raft`, `group`, `metadata` except its store
  adapters under `metadata/stores/`, and `txn` and `share` once they exist), `config`, the
  shared leaf `durable_files`, the pure modules of `metrics` (METRICS_CORES), of
  `console` (CONSOLE_CORES) and of `client` (CLIENT_CORES) stay
  pure: they import no I/O, clock, thread or global randomness module (a seeded
  `random.Random` comes in from the shell; `from random import Random` is the one import
  of `random` allowed), and of strom only each other: never
  `strom.server`, `strom.client`, `strom.cli`, `strom.spark`, nor a store adapter.
- `strom.spark` never imports `strom.server`: the connector talks to brokers as a client.
- `strom.raft` never imports `strom.metadata`: Raft replicates bytes and knows no records.
- The metadata stores stay behind their interface: no module outside `metadata/stores/`
  imports one of its modules but the package itself (the factory, `build_store`) and
  `base` (the interface, its capabilities and ports), and none names a concrete store (a
  class defined in a store adapter), not even in a comment or a string.

A violation names the module, the line and the forbidden import. The tests at the end
build a small fake package in tmp_path and check that each rule catches what it should.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "strom"

IO_MODULES = frozenset(
    {
        "asyncio",
        "concurrent",
        "multiprocessing",
        "random",
        "selectors",
        "socket",
        "ssl",
        "subprocess",
        "threading",
        "time",
    }
)
CORES = ("protocol", "log", "replication", "raft", "group", "metadata", "txn", "share", "fetch")
METRICS_CORES = (
    "metrics.health",
    "metrics.http_wire",
    "metrics.latency",
    "metrics.snapshot",
    "metrics.traffic",
)
"""The pure modules of `strom.metrics` (its registry and its server are the shell's)."""
CONSOLE_CORES = ("console.html", "console.browse", "console.throughput")
"""The console's pure modules (its backend, searches and server are the shell)."""
SECURITY_CORES = (
    "security.principal",
    "security.sasl",
    "security.scram",
    "security.connection_quotas",
    "security.jaas",
    "security.operations",
    "security.acls",
    "security.authorizer",
    "security.jwt_validation",
    "security.oauthbearer",
    "security.jwks_refresh",
    "security.quota_resolution",
    "security.quota_rates",
    "security.quota_sensors",
)
"""Listener security's pure modules (its TLS contexts are the shell's: they read files)."""
CLIENT_CORES = ("client.oauth_tokens", "client.oauth_oidc", "client.oauth_settings")
"""The client's pure OAUTHBEARER modules (the token source and its HTTP are the shell's)."""
PURE = (
    *CORES,
    *METRICS_CORES,
    *CONSOLE_CORES,
    *SECURITY_CORES,
    *CLIENT_CORES,
    "config",
    "durable_files",
)
"""Top-level parts of strom (packages or modules) held to the cores' rules."""
SHELL_INSIDE_PURE = ("metadata.stores",)
"""Parts of a pure package that belong to the shell (they may do I/O)."""
STORES = "metadata.stores"
STORE_INTERFACE = ("metadata.stores", "metadata.stores.base")
"""The only modules of the stores that code outside them may import."""
HANDLERS = "server.handlers"
BROKER = "server.broker"
HANDLERS_TAKING_THE_BROKER: frozenset[str] = frozenset()
"""Handler modules not yet converted to the contexts of handlers/ports.py. The list only
shrinks: a module that no longer imports the broker must leave it."""


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # the importing module, e.g. "strom.log.segment"
    line: int
    target: str  # the module it imports, e.g. "strom.protocol.records" or "asyncio"
    names: tuple[str, ...]  # what `from ... import` takes from it; () for `import target`
    statement: str  # as written, e.g. "from ..server import broker"
    type_checking: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        written = "" if self.statement == f"import {self.target}" else f" ({self.statement})"
        where = " under TYPE_CHECKING" if self.type_checking else ""
        return f"{self.module}:{self.line} imports {self.target}{written}{where}"


def module_name(path: Path, root: Path) -> str:
    """`strom.log.segment` for root/log/segment.py, `strom.log` for root/log/__init__.py."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_checking: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below `node`, with whether it sits under `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        under = type_checking
        if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
            under = True
        yield child, under
        yield from _walk(child, under)


def imports_of(path: Path, root: Path, modules: Set[str] = frozenset()) -> list[Import]:
    """Every import in the module at `path`, its target resolved to an absolute name.

    `from package import name` imports `package.name` when that is one of `modules` (a
    submodule), else `package` (a name defined in it).
    """
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node, type_checking in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += (
                Import(module, node.lineno, a.name, (), f"import {a.name}", type_checking)
                for a in node.names
            )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [base])])
            by_target: dict[str, list[str]] = {}
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                by_target.setdefault(submodule if submodule in modules else base, []).append(
                    alias.name
                )
            statement = ast.unparse(node)
            found += (
                Import(module, node.lineno, target, tuple(names), statement, type_checking)
                for target, names in by_target.items()
            )
    return found


def import_graph(root: Path) -> list[Import]:
    paths = sorted(root.rglob("*.py"))
    modules = frozenset(module_name(path, root) for path in paths)
    return [imp for path in paths for imp in imports_of(path, root, modules)]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _is_pure(name: str, top: str) -> bool:
    if name == top:
        return True  # the package's own (empty) __init__
    inside = name.split(".", 1)[1] if name.startswith(top + ".") else ""
    return any(_within(inside, part) for part in PURE) and not any(
        _within(inside, part) for part in SHELL_INSIDE_PURE
    )


def io_violations(graph: Iterable[Import], top: str = "strom") -> list[str]:
    """Pure modules importing an I/O, clock, thread or global-randomness module."""
    bad: list[str] = []
    for imp in graph:
        if not _is_pure(imp.module, top) or imp.target.split(".")[0] not in IO_MODULES:
            continue
        if imp.target == "random" and imp.names and set(imp.names) == {"Random"}:
            continue  # a seeded generator's class: the shell passes an instance in
        bad.append(str(imp))
    return bad


def layer_violations(graph: Iterable[Import], top: str = "strom") -> list[str]:
    """Pure modules importing strom's shell; spark importing the server; raft, metadata."""
    bad: list[str] = []
    for imp in graph:
        target = imp.target
        if not _within(target, top):
            continue
        if _is_pure(imp.module, top) and not _is_pure(target, top):
            bad.append(f"{imp}: a pure module may import only the pure parts of {top}")
        if _within(imp.module, f"{top}.spark") and _within(target, f"{top}.server"):
            bad.append(f"{imp}: {top}.spark must not import {top}.server")
        if _within(imp.module, f"{top}.raft") and _within(target, f"{top}.metadata"):
            bad.append(f"{imp}: {top}.raft must not import {top}.metadata")
    return bad


def store_boundary_violations(graph: Iterable[Import], top: str = "strom") -> list[str]:
    """Modules outside the stores importing a store module other than the interface."""
    stores, allowed = f"{top}.{STORES}", {f"{top}.{name}" for name in STORE_INTERFACE}
    return [
        f"{imp}: outside {stores}, import only {' or '.join(sorted(allowed))}"
        for imp in graph
        if not _within(imp.module, stores)
        and _within(imp.target, stores)
        and imp.target not in allowed
    ]


def handler_violations(
    graph: Iterable[Import], top: str = "strom", exempt: Set[str] = frozenset()
) -> list[str]:
    """Handler modules (but the `exempt` ones) importing the broker, in any form."""
    handlers, broker = f"{top}.{HANDLERS}", f"{top}.{BROKER}"
    return [
        f"{imp}: a handler gets the ports it uses (handlers/ports.py), never the broker"
        for imp in graph
        if _within(imp.module, handlers)
        and imp.module.removeprefix(f"{handlers}.") not in exempt
        and _within(imp.target, broker)
    ]


def concrete_store_names(root: Path) -> set[str]:
    """The classes the store adapters define (all of metadata/stores/ but the interface)."""
    interface = {f"{root.name}.{name}" for name in STORE_INTERFACE}
    names: set[str] = set()
    for path in sorted((root / Path(*STORES.split("."))).rglob("*.py")):
        if module_name(path, root) in interface:
            continue
        tree = ast.parse(path.read_text(), str(path))
        names |= {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    return names


def store_name_violations(root: Path) -> list[str]:
    """Modules outside the stores that mention a concrete store class, anywhere."""
    names = concrete_store_names(root)
    stores = f"{root.name}.{STORES}"
    bad: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        if _within(module, stores):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line))
            bad += [
                f"{module}:{number} names the store class {name}" for name in sorted(names & words)
            ]
    return bad


# --- strom itself --------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> list[Import]:
    return import_graph(SRC)


def test_the_graph_sees_strom_s_imports(graph: list[Import]) -> None:
    targets = {(imp.module, imp.target) for imp in graph}
    assert ("strom.log.segment", "strom.protocol.records") in targets
    assert ("strom.metadata.stores.raft.driver", "strom.raft.core") in targets


def test_pure_modules_import_no_io(graph: list[Import]) -> None:
    violations = io_violations(graph)
    assert not violations, "\n".join(["", *violations])


def test_layers_import_only_what_they_may(graph: list[Import]) -> None:
    violations = layer_violations(graph)
    assert not violations, "\n".join(["", *violations])


def test_the_stores_are_reached_only_through_their_interface(graph: list[Import]) -> None:
    violations = store_boundary_violations(graph)
    assert not violations, "\n".join(["", *violations])


def test_handlers_do_not_import_the_broker(graph: list[Import]) -> None:
    violations = handler_violations(graph, exempt=HANDLERS_TAKING_THE_BROKER)
    assert not violations, "\n".join(["", *violations])
    still = {
        imp.module.removeprefix(f"strom.{HANDLERS}.")
        for imp in graph
        if _within(imp.module, f"strom.{HANDLERS}") and _within(imp.target, f"strom.{BROKER}")
    }
    assert still == HANDLERS_TAKING_THE_BROKER, "converted: drop them from the list"


def test_no_code_outside_the_stores_names_a_store() -> None:
    assert {"RaftDriver", "ZooKeeperStore", "MemoryStore"} <= concrete_store_names(SRC)
    violations = store_name_violations(SRC)
    assert not violations, "\n".join(["", *violations])


# --- the checker, on a fake package ------------------------------------------------------


def _fake_package(root: Path, files: dict[str, str]) -> Path:
    top = root / "strom"
    for name, text in files.items():
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for directory in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    return top


def test_the_checker_catches_io_in_a_core_in_every_form(tmp_path: Path) -> None:
    top = _fake_package(
        tmp_path,
        {
            "log/a.py": "import asyncio\nfrom random import Random\n",
            "log/b.py": "def f():\n    import socket\n    from time import monotonic\n",
            "raft/c.py": "from random import Random, randint\n",
            "group/d.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import threading\n"
            ),
            "config/e.py": "import ssl\n",
            "durable_files.py": "from subprocess import run\n",
            "metadata/stores/f.py": "import asyncio\n",  # a store adapter may
            "server/g.py": "import asyncio\n",  # the shell may
        },
    )
    assert io_violations(import_graph(top)) == [
        "strom.config.e:1 imports ssl",
        "strom.durable_files:1 imports subprocess (from subprocess import run)",
        "strom.group.d:3 imports threading under TYPE_CHECKING",
        "strom.log.a:1 imports asyncio",
        "strom.log.b:2 imports socket",
        "strom.log.b:3 imports time (from time import monotonic)",
        "strom.raft.c:1 imports random (from random import Random, randint)",
    ]


def test_the_checker_catches_every_forbidden_layer_import(tmp_path: Path) -> None:
    top = _fake_package(
        tmp_path,
        {
            "log/a.py": "from ..server import broker\nfrom . import segment\n",
            "log/segment.py": "from strom.protocol import records\nfrom strom import config\n",
            "protocol/records.py": "",
            "raft/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from strom.metadata.image import MetadataImage\n"
            ),
            "group/c.py": "import strom.client.connection\n",
            "metadata/d.py": "from .stores import memory\n",
            "metadata/stores/memory.py": "from strom.server import tasks\n",
            "spark/e.py": "from strom import server\nfrom strom.protocol import records\n",
            "server/f.py": "from strom.spark import e\n",
        },
    )
    pure_only = ": a pure module may import only the pure parts of strom"
    assert layer_violations(import_graph(top)) == [
        "strom.group.c:1 imports strom.client.connection" + pure_only,
        "strom.log.a:1 imports strom.server (from ..server import broker)" + pure_only,
        "strom.metadata.d:1 imports strom.metadata.stores.memory (from .stores import memory)"
        + pure_only,
        "strom.raft.b:3 imports strom.metadata.image (from strom.metadata.image import "
        "MetadataImage) under TYPE_CHECKING: strom.raft must not import strom.metadata",
        "strom.spark.e:1 imports strom.server (from strom import server): "
        "strom.spark must not import strom.server",
    ]


def test_relative_imports_resolve_from_the_module_s_package(tmp_path: Path) -> None:
    top = _fake_package(
        tmp_path,
        {
            "raft/core.py": "from . import log\nfrom .log import RaftLog\nfrom .. import config\n",
            "raft/log.py": "",
            "config.py": "",
        },
    )
    graph = import_graph(top)
    found = {(imp.line, imp.target) for imp in graph if imp.module == "strom.raft.core"}
    assert found == {(1, "strom.raft.log"), (2, "strom.raft.log"), (3, "strom.config")}
    (top / "raft" / "__init__.py").write_text("from .core import RaftNode\nfrom . import log\n")
    in_init = {(imp.line, imp.target) for imp in import_graph(top) if imp.module == "strom.raft"}
    assert in_init == {(1, "strom.raft.core"), (2, "strom.raft.log")}


def test_the_checker_keeps_the_stores_behind_their_interface(tmp_path: Path) -> None:
    top = _fake_package(
        tmp_path,
        {
            "metadata/stores/__init__.py": "from .base import Store\nfrom . import raft\n",
            "metadata/stores/base.py": "class Store: ...\n",
            "metadata/stores/raft.py": "from .base import Store\nclass RaftStore(Store): ...\n",
            "metadata/stores/memory.py": "class MemoryStore: ...\n",
            "server/a.py": (
                "from strom.metadata.stores import build\n"
                "from strom.metadata.stores.base import Store\n"
                "from strom.metadata.stores.raft import RaftStore\n"
            ),
            "server/b.py": (
                "import strom.metadata.stores.memory\n"
                "def f(store: object) -> bool:\n"
                "    return type(store).__name__ == 'MemoryStore'  # MemoryStore\n"
            ),
            "server/c.py": "# a store, whichever it is: Store, RaftStores\n",
        },
    )
    assert store_boundary_violations(import_graph(top)) == [
        "strom.server.a:3 imports strom.metadata.stores.raft (from strom.metadata.stores.raft "
        "import RaftStore): outside strom.metadata.stores, import only strom.metadata.stores "
        "or strom.metadata.stores.base",
        "strom.server.b:1 imports strom.metadata.stores.memory: outside "
        "strom.metadata.stores, import only strom.metadata.stores or strom.metadata.stores.base",
    ]
    assert concrete_store_names(top) == {"RaftStore", "MemoryStore"}
    assert store_name_violations(top) == [
        "strom.server.a:3 names the store class RaftStore",
        "strom.server.b:3 names the store class MemoryStore",
    ]


def test_the_checker_keeps_the_broker_out_of_the_handlers(tmp_path: Path) -> None:
    top = _fake_package(
        tmp_path,
        {
            "server/broker.py": "class Broker: ...\n",
            "server/handlers/__init__.py": "from strom.server.broker import Broker\n",
            "server/handlers/a.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from strom.server.broker import Broker\n"
            ),
            "server/handlers/b.py": "from ...server import broker\n",
            "server/handlers/c.py": "import strom.server.broker\n",
            "server/handlers/d.py": "from strom.server.partitions import PartitionManager\n",
            "server/handlers/old.py": "from strom.server.broker import Broker\n",
            "server/other.py": "from strom.server.broker import Broker\n",
        },
    )
    why = ": a handler gets the ports it uses (handlers/ports.py), never the broker"
    assert handler_violations(import_graph(top), exempt={"old"}) == [
        "strom.server.handlers:1 imports strom.server.broker "
        f"(from strom.server.broker import Broker){why}",
        "strom.server.handlers.a:3 imports strom.server.broker "
        f"(from strom.server.broker import Broker) under TYPE_CHECKING{why}",
        "strom.server.handlers.b:1 imports strom.server.broker "
        f"(from ...server import broker){why}",
        f"strom.server.handlers.c:1 imports strom.server.broker{why}",
    ]
