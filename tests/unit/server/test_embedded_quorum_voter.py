"""Where DescribeQuorum lists the one voter of an embedded single node (no
controller.quorum.voters): at its controller listener if it has one, else at the client
listener its clients use; never at a made-up localhost:0."""

from __future__ import annotations

import uuid
from pathlib import Path

from strom.config import BrokerConfig, Listener, load_config
from strom.metadata.stores import Advertised, MetadataStore, StorePorts, build_store
from strom.server.contexts import quorum_listener_name
from strom.server.metadata_state import MetadataState

NODE_ID = 1


def config_of(tmp_path: Path, *settings: str) -> BrokerConfig:
    return load_config(overrides=[f"node.id={NODE_ID}", f"log.dirs={tmp_path}", *settings])


def store_of(
    tmp_path: Path, config: BrokerConfig, bound: list[tuple[Listener, int]]
) -> MetadataStore:
    ports = StorePorts(
        node_id=NODE_ID,
        metadata=MetadataState(NODE_ID),
        on_change=lambda: None,
        fail=lambda _why: None,
        watches=lambda: None,
        advertised=lambda: Advertised("PLAINTEXT", "127.0.0.1", 41001),
        cluster_id=lambda: None,
        incarnation_id=uuid.uuid4(),
        rack=None,
        clock_ms=lambda: 0,
    )
    store = build_store(
        config, ports, raft_directory=tmp_path / "raft", snapshot_every_bytes=1 << 20, bound=bound
    )
    assert store is not None
    return store


def test_without_a_controller_listener_it_is_listed_where_clients_reach_it(
    tmp_path: Path,
) -> None:
    config = config_of(tmp_path, "listeners=PLAINTEXT://127.0.0.1:0")
    (client,) = config.client_listeners
    store = store_of(tmp_path, config, [(client, 41001)])
    assert store.controller_endpoint(NODE_ID) == ("127.0.0.1", 41001)
    assert quorum_listener_name(config) == "PLAINTEXT"


def test_with_a_controller_listener_it_is_listed_there_at_the_port_bound(
    tmp_path: Path,
) -> None:
    config = config_of(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://0.0.0.0:0",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    )
    (client,), (controller,) = config.client_listeners, config.controller_listeners
    store = store_of(tmp_path, config, [(client, 41001), (controller, 41002)])
    assert store.controller_endpoint(NODE_ID) == ("localhost", 41002)  # the wildcard's name
    assert quorum_listener_name(config) == "CONTROLLER"


def test_configured_voters_are_listed_as_configured(tmp_path: Path) -> None:
    config = config_of(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:9093",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.quorum.voters=1@controller-1.example:9093",
    )
    store = store_of(tmp_path, config, [])
    assert store.controller_endpoint(NODE_ID) == ("controller-1.example", 9093)
    assert quorum_listener_name(config) == "CONTROLLER"
