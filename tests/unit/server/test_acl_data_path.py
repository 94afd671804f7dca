"""ACL checks of Produce and Fetch on real partition logs, without a broker: WRITE and READ
on the topic, WRITE on the transactional id, CLUSTER_ACTION for followers; no authorizer
changes nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from server_harness import TOPIC, Node, batch, fetch_request, image_of, node, produce_request, run

from strom.protocol.codec import Request
from strom.security.acls import CLUSTER_NAME, AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.fetch import handle_fetch
from strom.server.handlers.produce import handle_produce

ALICE = "User:alice"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(
    operation: AclOperation,
    kind: AclResourceType = AclResourceType.TOPIC,
    name: str = TOPIC,
    permission: AclPermissionType = ALLOW,
) -> AclBinding:
    return AclBinding(kind, name, PatternType.LITERAL, ALICE, "*", operation, permission)


def as_alice(request: Request) -> Request:
    return dataclasses.replace(request, principal=ALICE, client_host="/10.0.0.7")


def produced(at: Node, authorizer: Authorizer | None, request: Request) -> Any:
    context = dataclasses.replace(at.produce, authorizer=lambda: authorizer)
    (topic,) = run(handle_produce(context, as_alice(request))).responses
    (partition,) = topic.partition_responses
    return partition.error_code


def fetched(at: Node, authorizer: Authorizer | None, request: Request) -> Any:
    context = dataclasses.replace(at.fetch, authorizer=lambda: authorizer)
    (topic,) = run(handle_fetch(context, as_alice(request))).responses
    (partition,) = topic.partitions
    return partition.error_code


def authorizer(*bindings: AclBinding) -> Authorizer:
    return Authorizer(AclIndex(bindings))


def test_produce_needs_write_on_the_topic(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    request = produce_request(batch(b"a"))
    assert produced(at, authorizer(), request) == ErrorCode.topic_authorization_failed
    assert produced(at, authorizer(acl(AclOperation.READ)), request) == (
        ErrorCode.topic_authorization_failed
    )
    assert at.partition().log.log_end_offset == 0  # nothing refused was written
    assert produced(at, authorizer(acl(AclOperation.WRITE)), request) == ErrorCode.none
    assert produced(at, None, request) == ErrorCode.none
    assert at.partition().log.log_end_offset == 2
    at.close()


def test_a_topic_the_principal_may_not_write_is_refused_before_its_existence_is_told(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, image_of())
    request = produce_request(batch(b"a"), topic="unknown")
    assert produced(at, authorizer(), request) == ErrorCode.topic_authorization_failed
    allowed = authorizer(acl(AclOperation.WRITE, name="unknown"))
    assert produced(at, allowed, request) == ErrorCode.unknown_topic_or_partition
    at.close()


def test_a_transactional_id_the_principal_may_not_write_refuses_the_whole_request(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, image_of())
    request = produce_request(batch(b"a"))
    request = dataclasses.replace(
        request, body=dataclasses.replace(request.body, transactional_id="tx")
    )
    only_topic = authorizer(acl(AclOperation.WRITE))
    assert produced(at, only_topic, request) == ErrorCode.transactional_id_authorization_failed
    at.close()


def test_a_consumer_needs_read_on_the_topic(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    produced(at, None, produce_request(batch(b"a")))
    request = fetch_request(0)
    assert fetched(at, authorizer(), request) == ErrorCode.topic_authorization_failed
    assert fetched(at, authorizer(acl(AclOperation.DESCRIBE)), request) == (
        ErrorCode.topic_authorization_failed
    )
    assert fetched(at, authorizer(acl(AclOperation.READ)), request) == ErrorCode.none
    assert fetched(at, authorizer(acl(AclOperation.ALL)), request) == ErrorCode.none
    denied = authorizer(acl(AclOperation.ALL), acl(AclOperation.READ, permission=DENY))
    assert fetched(at, denied, request) == ErrorCode.topic_authorization_failed
    assert fetched(at, None, request) == ErrorCode.none
    at.close()


def test_a_follower_needs_cluster_action_on_every_partition(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    request = fetch_request(0, replica_id=2)
    reader = authorizer(acl(AclOperation.READ))
    assert fetched(at, reader, request) == ErrorCode.topic_authorization_failed
    cluster = authorizer(acl(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME))
    assert fetched(at, cluster, request) == ErrorCode.none
    at.close()


def test_a_host_acl_names_the_clients_address(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    request = produce_request(batch(b"a"))

    def on(host: str) -> Authorizer:
        return authorizer(
            AclBinding(
                AclResourceType.TOPIC,
                TOPIC,
                PatternType.LITERAL,
                ALICE,
                host,
                AclOperation.WRITE,
                ALLOW,
            )
        )

    assert produced(at, on("10.0.0.7"), request) == ErrorCode.none
    assert produced(at, on("10.0.0.0/24"), request) == ErrorCode.none
    assert produced(at, on("10.0.1.7"), request) == ErrorCode.topic_authorization_failed
    at.close()
