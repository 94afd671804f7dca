from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess
from zookeeper_fixtures import zk_chroot, zk_connect, zookeeper_server  # noqa: F401


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh single-node strom on a free port, stopped after the test."""
    process = BrokerProcess(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture(params=["raft", "zookeeper"])
def store(request: pytest.FixtureRequest) -> str | None:
    """The metadata store a cluster test runs on, for tests written once for both: None
    for the built-in Raft quorum, or a zookeeper.connect (a fresh chroot on the test
    session's private ZooKeeper server)."""
    if request.param == "raft":
        return None
    connect: str = request.getfixturevalue("zk_connect")
    return connect


def store_settings(store: str | None, session_timeout_ms: int) -> list[str]:
    """On ZooKeeper a broker's liveness is its session: as short as the Raft cluster's
    broker.session.timeout.ms, so both fence a dead broker equally soon."""
    return [] if store is None else [f"zookeeper.session.timeout.ms={session_timeout_ms}"]
