"""strom's pytest plugin: strom.testing as fixtures. It is registered through the
`pytest11` entry point, so installing strom gives every test suite these fixtures, with
no conftest.

    strom_broker           a one-node cluster for one test
    strom_cluster          a three-node cluster for one test
    strom_session_broker   a one-node cluster shared by the whole session
    strom_session_cluster  a three-node cluster shared by the whole session

Each is a `strom.testing.StromCluster`; hand `.bootstrap_servers` to any Kafka client.
A test changes its cluster with the `strom` marker or by indirect parametrization:

    @pytest.mark.strom(nodes=5, config={"num.partitions": 3}, processes=False)
    def test_it(strom_cluster): ...

    @pytest.mark.parametrize("strom_cluster", [{"nodes": 1}, {"nodes": 3}], indirect=True)
    def test_both(strom_cluster): ...

The session fixtures read the ini options `strom_session_nodes` and `strom_config`
(`key=value` lines) instead, and are reset after each test that used them (the network
healed, injected faults dropped, paused nodes resumed, stopped ones started again).
This module imports strom's broker only when a fixture is used, so it costs nothing in
test runs that do not use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from strom.testing.cluster import StromCluster

_OPTIONS = ("nodes", "config", "processes", "in_memory")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("strom_session_nodes", "nodes of strom_session_cluster", default="3")
    parser.addini(
        "strom_config",
        "broker configs (key=value lines) of the session clusters",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "strom(nodes=N, config={...}, processes=False, in_memory=True): the cluster that "
        "strom_broker or strom_cluster starts for this test",
    )


def _options(request: pytest.FixtureRequest, nodes: int) -> dict[str, Any]:
    options: dict[str, Any] = {"nodes": nodes}
    marker = request.node.get_closest_marker("strom")
    sources: list[Mapping[str, Any]] = []
    if marker is not None:
        if marker.args:
            raise pytest.UsageError("@pytest.mark.strom takes keyword arguments only")
        sources.append(marker.kwargs)
    param = getattr(request, "param", None)
    if param is not None:
        if not isinstance(param, Mapping):
            raise pytest.UsageError(
                f"{request.fixturename} is parametrized with mappings such as "
                f"{{'nodes': 3, 'config': {{...}}}}, got {param!r}"
            )
        sources.append(param)
    for source in sources:
        unknown = set(source) - set(_OPTIONS)
        if unknown:
            raise pytest.UsageError(
                f"unknown strom option(s) {sorted(unknown)}; use {', '.join(_OPTIONS)}"
            )
        for key, value in source.items():
            if key == "config":
                options["config"] = {**options.get("config", {}), **value}
            else:
                options[key] = value
    return options


def _cluster(options: Mapping[str, Any]) -> Iterator[StromCluster]:
    from strom.testing.cluster import StromCluster

    with StromCluster(**options) as cluster:
        yield cluster


def _session_options(config: pytest.Config, nodes: int) -> dict[str, Any]:
    settings = {}
    for line in config.getini("strom_config"):
        key, separator, value = str(line).partition("=")
        if not separator:
            raise pytest.UsageError(f"strom_config lines are key=value, got {line!r}")
        settings[key.strip()] = value.strip()
    return {"nodes": nodes, "config": settings}


@pytest.fixture
def strom_broker(request: pytest.FixtureRequest) -> Iterator[StromCluster]:
    """A one-node strom cluster, started for this test and stopped after it."""
    yield from _cluster(_options(request, nodes=1))


@pytest.fixture
def strom_cluster(request: pytest.FixtureRequest) -> Iterator[StromCluster]:
    """A three-node strom cluster (see the `strom` marker), for this test only."""
    yield from _cluster(_options(request, nodes=3))


_SESSION_FIXTURES = ("strom_session_broker", "strom_session_cluster")


@pytest.fixture(autouse=True)
def _strom_reset_session_clusters(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test, undo its faults on the session clusters it used."""
    used = [request.getfixturevalue(n) for n in _SESSION_FIXTURES if n in request.fixturenames]
    yield
    for cluster in used:
        cluster.reset()


@pytest.fixture(scope="session")
def strom_session_broker(pytestconfig: pytest.Config) -> Iterator[StromCluster]:
    """A one-node strom cluster shared by every test of the session."""
    yield from _cluster(_session_options(pytestconfig, nodes=1))


@pytest.fixture(scope="session")
def strom_session_cluster(pytestconfig: pytest.Config) -> Iterator[StromCluster]:
    """A strom cluster (ini `strom_session_nodes`, 3) shared by every test of the session."""
    nodes = int(pytestconfig.getini("strom_session_nodes"))
    yield from _cluster(_session_options(pytestconfig, nodes=nodes))
