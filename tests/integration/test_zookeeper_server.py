"""The private ZooKeeper test server (zookeeper.py) against a real kazoo client."""

from __future__ import annotations

import queue
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.loggingsupport import BLATHER
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from zookeeper import ZooKeeperError, ZooKeeperServer, ensure_chroot, kazoo_client
from zookeeper_fixtures import zk_chroot, zk_connect, zookeeper_server  # noqa: F401

EVENT_TIMEOUT_S = 30.0


def negotiated_timeout_ms(caplog: pytest.LogCaptureFixture, session_id: int) -> int:
    """The session timeout the server granted, as kazoo logs it when the session starts
    (ZooKeeper 3.8 logs it only at DEBUG)."""
    for record in caplog.records:
        if (
            record.name == "kazoo.client"
            and str(record.msg).startswith("Session created")
            and isinstance(record.args, tuple)
            and record.args[0] == session_id
        ):
            timeout_ms = record.args[2]
            assert isinstance(timeout_ms, int)
            return timeout_ms
    raise AssertionError(f"kazoo logged no session 0x{session_id:x}")


def test_the_shared_server_serves_standalone_on_loopback(
    zookeeper_server: ZooKeeperServer,  # noqa: F811
) -> None:
    assert zookeeper_server.connect_string == f"127.0.0.1:{zookeeper_server.port}"
    assert zookeeper_server.command("ruok") == "imok"
    assert "Mode: standalone" in zookeeper_server.command("srvr")
    assert "zk_server_state\tstandalone" in zookeeper_server.command("mntr")
    assert "not in the whitelist" in zookeeper_server.command("conf")
    assert "clientPortAddress is 127.0.0.1:" in zookeeper_server.log_path.read_text()


def test_a_chroot_holds_the_znodes_of_one_test(
    zookeeper_server: ZooKeeperServer,  # noqa: F811
    zk_chroot: str,  # noqa: F811
    zk_connect: str,  # noqa: F811
) -> None:
    assert re.fullmatch(r"/strom-test-[0-9a-f]{8}", zk_chroot)
    assert zk_connect == zookeeper_server.connect_string + zk_chroot
    other_chroot = zk_chroot + "-other"
    ensure_chroot(zookeeper_server.connect_string, other_chroot)

    with kazoo_client(zk_connect) as client:
        client.create("/brokers/ids/1", b"broker 1", makepath=True)
        assert client.get("/brokers/ids/1")[0] == b"broker 1"
    with kazoo_client(zookeeper_server.connect_string) as root:
        assert root.get(f"{zk_chroot}/brokers/ids/1")[0] == b"broker 1"
    with kazoo_client(zookeeper_server.connect_string + other_chroot) as other:
        assert other.get_children("/") == []


def test_an_ephemeral_znode_goes_with_its_session(zk_connect: str) -> None:  # noqa: F811
    events: queue.Queue[WatchedEvent] = queue.Queue()
    with kazoo_client(zk_connect) as watcher, kazoo_client(zk_connect) as owner:
        owner.create("/member", b"here", ephemeral=True)
        assert watcher.exists("/member", watch=events.put) is not None

        owner.stop()  # closes the session

        assert events.get(timeout=EVENT_TIMEOUT_S).type == EventType.DELETED
        assert watcher.exists("/member") is None


def test_session_timeouts_from_1_to_20_s_are_granted_as_asked(
    zk_connect: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(BLATHER, logger="kazoo.client")
    for timeout_s in (1.0, 4.0, 20.0):
        with kazoo_client(zk_connect, session_timeout_s=timeout_s) as client:
            session_id = client.client_id[0]
        assert negotiated_timeout_ms(caplog, session_id) == timeout_s * 1000


def test_kill_and_restart_keep_znodes_and_a_reconnecting_session(tmp_path: Path) -> None:
    states: queue.Queue[KazooState] = queue.Queue()
    with ZooKeeperServer(tmp_path / "zk") as server:
        port = server.port
        ensure_chroot(server.connect_string, "/strom")
        connect = f"{server.connect_string}/strom"
        # kazoo waits for a Connect answer for the session timeout divided by the number
        # of hosts. An attempt made while the restarted JVM has bound its port but not yet
        # served it would, with one host, wait out the whole 4 s, and the retry after it
        # could arrive after the restored session's deadline. Naming the one server twice
        # halves that wait, so the retry lands while the session is still alive.
        twice = f"{server.connect_string},{server.connect_string}/strom"
        with kazoo_client(twice, session_timeout_s=4.0) as client:
            client.add_listener(states.put)
            session_id = client.client_id[0]
            client.create("/persistent", b"kept")
            client.create("/ephemeral", b"mine", ephemeral=True)

            killed_at = time.monotonic()
            server.kill()
            assert states.get(timeout=EVENT_TIMEOUT_S) == KazooState.SUSPENDED
            server.restart()
            assert server.port == port
            assert states.get(timeout=EVENT_TIMEOUT_S) == KazooState.CONNECTED
            # ZooKeeper renews restored sessions' deadlines when it starts, so a slow JVM
            # start does not expire the session; this only says how long it took.
            print(f"reconnected {time.monotonic() - killed_at:.1f} s after the kill")

            assert client.client_id[0] == session_id
            assert client.get("/ephemeral")[0] == b"mine"
            assert client.get("/persistent")[0] == b"kept"

        with kazoo_client(connect) as other:
            assert other.get("/persistent")[0] == b"kept"
            assert other.exists("/ephemeral") is None  # its session was closed


def test_stop_reaps_the_server_and_restart_reuses_port_and_data(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zk") as server:
        ensure_chroot(server.connect_string, "/kept")
        pid = server.pid
        server.restart()
        assert server.pid != pid
        with kazoo_client(server.connect_string) as client:
            assert client.exists("/kept") is not None
    assert not server.is_running() and server.pid is None
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", server.port))  # nothing listens there any more
        sock.listen()
    assert sorted(path.name for path in (tmp_path / "zk").iterdir()) == [
        "data",
        "log4j.properties",
        "zoo.cfg",
        "zookeeper.log",
        "zookeeper.out",
    ]


def test_start_fails_with_the_log_tail_when_the_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = ZooKeeperServer(tmp_path, port=taken.getsockname()[1])
        with pytest.raises(ZooKeeperError, match="Address already in use"):
            server.start()
    assert not server.is_running()


def test_the_server_dies_with_a_test_run_killed_outright(tmp_path: Path) -> None:
    script = (
        "import sys, pathlib, time\n"
        "from zookeeper import ZooKeeperServer\n"
        "server = ZooKeeperServer(pathlib.Path(sys.argv[1]))\n"
        "server.start()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    runner = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=Path(__file__).parent,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdout is not None
        pid = int(runner.stdout.readline())
    finally:
        runner.kill()
        runner.wait()
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while is_alive(pid):
        assert time.monotonic() < deadline, f"ZooKeeper {pid} outlived its test run"
        time.sleep(0.1)


def is_alive(pid: int) -> bool:
    """Neither gone nor a zombie (an orphan is reaped by whatever init the machine has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
