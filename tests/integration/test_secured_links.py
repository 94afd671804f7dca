"""Nodes reaching each other over TLS and SASL: the inter-broker listener (replication,
transaction markers) and the controller listener (the Raft quorum, registrations,
heartbeats, the metadata) speak SASL_SSL, each node logging in with the username and
password of its listener's JAAS config and checking the other's certificate and host
name. The clients use a PLAINTEXT listener, which no node uses to reach another. Sessions
last 2 s (connections.max.reauth.ms), so the nodes' links renew theirs on the same
connections (KIP-368) while they work."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from client_helpers import CLIENT_TIMEOUT_S, unique_topic, wait_until
from cluster import free_ports, running_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from zookeeper import kazoo_client

from strom.security.scram import ScramMechanism, credential_from_password, format_scram_config
from strom.server.private import PrivateApi

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tls_material import TlsMaterial, make_tls_material

PARTITIONS = 3
RECORDS = 300
SESSION_MS = 2000
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="node" password="node-secret" user_node="node-secret";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="node" password="node-secret";'
)


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("links-tls"))


def _settings(material: TlsMaterial, store: str | None) -> list[str]:
    tls = [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={material.server.keystore_pem_path}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={material.ca_cert_path}",
        "ssl.client.auth=required",  # each node shows its certificate too
        "inter.broker.listener.name=SASL_SSL",
        "min.insync.replicas=2",
        f"connections.max.reauth.ms={SESSION_MS}",
    ]
    if store is not None:
        # SCRAM: the nodes' own user is made in ZooKeeper before they start, as Kafka's
        # operators do (the brokers cannot reach each other to make it).
        return [
            *tls,
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={SCRAM_JAAS}",
        ]
    return [
        *tls,
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
        f"listener.name.controller.plain.sasl.jaas.config={PLAIN_JAAS}",
    ]


def _make_node_user(store: str) -> None:
    credential = credential_from_password(
        ScramMechanism.SCRAM_SHA_512, "node-secret", b"links-test-salt", 4096
    )
    body = {"version": 1, "config": {"SCRAM-SHA-512": format_scram_config(credential)}}
    with kazoo_client(store) as zk:
        zk.create("/config/users/node", json.dumps(body).encode(), makepath=True)


def test_nodes_replicate_and_agree_over_sasl_ssl(
    tmp_path: Path, store: str | None, material: TlsMaterial
) -> None:
    if store is not None:
        _make_node_user(store)
    ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
    with running_cluster(
        tmp_path,
        3,
        zookeeper=store,
        settings=_settings(material, store),
        more_listeners={node: f"SASL_SSL://localhost:{port}" for node, port in ports.items()},
    ) as cluster:
        conf: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap}
        admin = AdminClient(conf)
        topic = unique_topic("links")
        futures = admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
        futures[topic].result(CLIENT_TIMEOUT_S)
        producer = Producer({**conf, "acks": "all"})
        for i in range(RECORDS):
            producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0  # min.insync.replicas=2: replicated

        def all_in_sync() -> bool:
            partitions = admin.list_topics(topic, timeout=5).topics[topic].partitions
            return all(sorted(p.isrs) == [1, 2, 3] for p in partitions.values())

        wait_until(all_in_sync, CLIENT_TIMEOUT_S, "every replica in sync over SASL_SSL")
        consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
        values: set[bytes] = set()
        try:
            consumer.subscribe([topic])
            wait_until(
                lambda: (
                    values.update(
                        m.value() for m in consumer.consume(500, 0.5) if m.error() is None
                    )
                    or len(values) == RECORDS
                ),
                CLIENT_TIMEOUT_S,
                "every record consumed",
            )
        finally:
            consumer.close()
        assert values == {f"v{i}".encode() for i in range(RECORDS)}
        # Every link (Raft, heartbeats, metadata, replica fetches) outlives two sessions.
        more = 0
        renewals_from = time.monotonic()
        while time.monotonic() - renewals_from < 2.5 * SESSION_MS / 1000:
            producer.produce(topic, f"late{more}".encode(), partition=more % PARTITIONS)
            more += 1
            producer.poll(0.05)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        logs = cluster.logs()
        assert "failed authentication" not in logs, logs
        assert "has expired" not in logs, logs  # no node was cut off for not renewing
        assert _closed_after_a_node_frame_before_login(material, ports[1])
        if store is not None:  # there the listener serves the nodes' own APIs too
            wait_until(
                lambda: "node-to-node frame before SASL authentication" in cluster.logs(),
                CLIENT_TIMEOUT_S,
                "the refusal in the log",
            )


def _closed_after_a_node_frame_before_login(material: TlsMaterial, port: int) -> bool:
    """A TLS client with a trusted certificate that sends one of strom's node-to-node
    frames (a metadata fetch) without logging in first: the node closes the connection."""
    context = ssl.create_default_context(cafile=str(material.ca_cert_path))
    context.load_cert_chain(material.server.cert_path, material.server.key_path)
    payload = struct.pack(">iqi", 1, 0, 0)
    frame = struct.pack(">ihhi", 8 + len(payload), PrivateApi.METADATA_FETCH, 0, 1) + payload
    with (
        socket.create_connection(("localhost", port), timeout=CLIENT_TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(frame)
        return tls.recv(1) == b""
