"""Kafka's connection limits on a real broker, with raw sockets and an admin client:
max.connections.per.ip closes one connection too many at once and its overrides change
at run time; max.connections holds a new connection unserved until a slot frees; the
inter-broker listener is protected, and the least recently used connection of another
listener makes room for it; max.connection.creation.rate paces new connections.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import kafka_wire as wire
import pytest
from broker import BrokerProcess, free_port
from client_helpers import CLIENT_TIMEOUT_S, wait_until
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.api_versions.v3.request import ApiVersionsRequest

API_VERSIONS = ApiVersionsRequest(client_software_name="limits", client_software_version="1")


def _served(sock: socket.socket) -> bool:
    """Whether the broker answers ApiVersions on `sock` (False: it closed it)."""
    try:
        return wire.call(sock, API_VERSIONS).error_code == 0
    except wire.Closed:
        return False


def _answered_within(sock: socket.socket, timeout_s: float) -> bool:
    """Sends ApiVersions and says whether its answer came within `timeout_s`."""
    wire.send_body(sock, API_VERSIONS)
    sock.settimeout(timeout_s)
    try:
        wire.read_frame(sock)
    except TimeoutError:
        return False
    finally:
        sock.settimeout(CLIENT_TIMEOUT_S)
    return True


def _broker(tmp_path: Path, *settings: str, more_listeners: tuple[str, ...] = ()) -> BrokerProcess:
    broker = BrokerProcess(
        tmp_path / "data",
        extra=[part for setting in settings for part in ("--set", setting)],
        more_listeners=more_listeners,
    )
    broker.start()
    return broker


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as sockets:
        yield sockets


def _set_broker_config(bootstrap: str, name: str, value: str) -> None:
    """For broker 1 (librdkafka cannot name the cluster-wide default)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def test_one_connection_too_many_from_an_address_is_closed(
    tmp_path: Path, stack: ExitStack
) -> None:
    broker = _broker(tmp_path, "max.connections.per.ip=3")
    try:
        held = [stack.enter_context(wire.connect(broker.port)) for _ in range(3)]
        assert all(_served(sock) for sock in held)
        with wire.connect(broker.port) as extra:
            assert wire.wait_closed(extra, 10.0)
        assert all(_served(sock) for sock in held)  # the others go on
        assert "max.connections.per.ip" in broker.read_log()

        # Room for the admin client (two connections), then an override for 127.0.0.1.
        held.pop().close()
        held.pop().close()
        _set_broker_config(broker.bootstrap, "max.connections.per.ip.overrides", "127.0.0.1:5")
        wait_until(
            lambda: "connection limits now" in broker.read_log(),
            CLIENT_TIMEOUT_S,
            "the new limits in the broker's log",
        )
        # One connection is held: room for exactly four more.
        wait_until(
            lambda: _served_until_refused(broker.port) == 4,
            CLIENT_TIMEOUT_S,
            "four more connections from 127.0.0.1 to be served, and the fifth closed",
        )
    finally:
        broker.kill()


def _served_until_refused(port: int) -> int:
    """Opens connections until one is closed by the broker (at most 10): how many were
    served. All are closed again."""
    with ExitStack() as opened:
        for served in range(10):
            if not _served(opened.enter_context(wire.connect(port))):
                return served
    return 10


def test_a_full_broker_holds_a_new_connection_until_one_closes(
    tmp_path: Path, stack: ExitStack
) -> None:
    broker = _broker(tmp_path, "max.connections=3")
    try:
        held = [stack.enter_context(wire.connect(broker.port)) for _ in range(3)]
        assert all(_served(sock) for sock in held)
        waiting = stack.enter_context(wire.connect(broker.port))
        assert not _answered_within(waiting, 1.0)  # accepted by the kernel, not served
        held[0].close()
        waiting.settimeout(CLIENT_TIMEOUT_S)
        wire.read_frame(waiting)  # the answer to the request it sent while waiting
        assert _served(waiting)
    finally:
        broker.kill()


def test_the_inter_broker_listener_is_protected(tmp_path: Path, stack: ExitStack) -> None:
    """PLAINTEXT is the inter-broker listener; EXTERNAL is another. With max.connections
    2 held on EXTERNAL, an inter-broker connection is still served at once, and the
    least recently used EXTERNAL connection is closed to make room, as Kafka does."""
    external = free_port()
    broker = _broker(
        tmp_path,
        "max.connections=2",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "EXTERNAL:PLAINTEXT",
        more_listeners=(f"EXTERNAL://127.0.0.1:{external}",),
    )
    try:
        older, newer = (stack.enter_context(wire.connect(external)) for _ in range(2))
        assert _served(older)
        assert _served(newer)  # used last
        internal = stack.enter_context(wire.connect(broker.port))
        assert _served(internal)
        assert wire.wait_closed(older, 10.0)
        assert _served(newer)
    finally:
        broker.kill()


def test_new_connections_are_paced_by_the_creation_rate(tmp_path: Path, stack: ExitStack) -> None:
    broker = _broker(tmp_path, "max.connection.creation.rate=5")
    try:
        count = 8
        answered: list[float] = []
        lock = threading.Lock()

        def one() -> None:
            with wire.connect(broker.port) as sock:
                assert _served(sock)
                with lock:
                    answered.append(time.monotonic())

        started = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(CLIENT_TIMEOUT_S)
        assert len(answered) == count
        # 5 a second: the 8th comes in no sooner than 7/5 s after the first.
        assert max(answered) - started >= 1.2
    finally:
        broker.kill()
