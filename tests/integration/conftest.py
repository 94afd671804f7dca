from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess, free_port
from group_members import KIP848_BROKER_SETTINGS, Member
from oauth_helpers import keys, oauth_broker, tls  # noqa: F401 - the OAUTHBEARER tests'
from zookeeper_fixtures import zk_chroot, zk_connect, zookeeper_server  # noqa: F401


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh single-node `strom serve` process on a free port, killed after the test.
    For the tests whose point is a real process (SIGKILL, the kernel refusing a
    connection to it); the others use the strom plugin's `strom_broker`."""
    process = BrokerProcess(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[BrokerProcess, str]]:
    """A broker with its metrics endpoint on a free port, and that endpoint's URL."""
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", extra=["--metrics", f"127.0.0.1:{port}"])
    broker.start()
    try:
        yield broker, f"http://127.0.0.1:{port}"
    finally:
        broker.kill()


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


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def new_broker(data_dir: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers on `data_dir`; all are killed at the end."""
    started: list[BrokerProcess] = []

    def start(*extra: str) -> BrokerProcess:
        broker = BrokerProcess(data_dir, extra=list(extra))
        started.append(broker)
        broker.start()
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.kill()


@pytest.fixture
def kip848_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A `strom serve` process whose KIP-848 groups have short timers: a 4 s session
    timeout, heartbeats every 0.5 s."""
    process = BrokerProcess(
        tmp_path / "data",
        extra=[part for setting in KIP848_BROKER_SETTINGS for part in ("--set", setting)],
    )
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    """The group members (consumer processes) a test starts, killed after it."""
    started: list[Member] = []
    try:
        yield started
    finally:
        for member in started:
            member.kill()
