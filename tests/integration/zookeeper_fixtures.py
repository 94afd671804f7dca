"""pytest fixtures for one private ZooKeeper shared by the whole test session.

Import them into a test module (no conftest registers them):

    from zookeeper_fixtures import zk_chroot, zk_connect, zookeeper_server  # noqa: F401

    def test_register(zk_connect: str) -> None:
        with kazoo_client(zk_connect) as client:  # sees only its own chroot
            ...

Every test gets its own chroot, so tests sharing the server never see each other's
znodes. Tests that kill or restart ZooKeeper start their own ZooKeeperServer instead.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator

import pytest
from zookeeper import ZooKeeperServer, ensure_chroot

# pytest makes one session fixture per module that imports it; these make every one of
# them hand out the same server, stopped when the last of them is torn down (all of them
# are torn down at the end of the session).
_shared: ZooKeeperServer | None = None
_users = 0


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """The session's ZooKeeper, started on first use and stopped at the end of the session
    (whether tests failed or not); its data is removed then, its logs kept."""
    global _shared, _users
    server = _shared
    if server is None:
        server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
        server.start()
        _shared = server
    _users += 1
    try:
        yield server
    finally:
        _users -= 1
        if _users == 0:
            _shared = None
            server.stop()
            shutil.rmtree(server.data_dir, ignore_errors=True)


@pytest.fixture
def zk_chroot() -> str:
    """A fresh chroot path for this test, not created (zk_connect creates it)."""
    return f"/strom-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zk_connect(zookeeper_server: ZooKeeperServer, zk_chroot: str) -> str:
    """The connect string of the shared server under this test's chroot, which exists
    already: "127.0.0.1:<port>/strom-test-<uuid8>"."""
    assert zookeeper_server.is_running(), "a test stopped the shared ZooKeeper"
    ensure_chroot(zookeeper_server.connect_string, zk_chroot)
    return f"{zookeeper_server.connect_string}{zk_chroot}"
