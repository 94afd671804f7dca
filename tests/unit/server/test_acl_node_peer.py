"""strom's node-to-node frames (server/private.py) need CLUSTER_ACTION on the cluster, as
Kafka asks of its brokers: `contexts.node_peer` decides it from the broker's authorizer
(any principal may without one), and a Connection whose principal it refuses closes at
the first such frame without handing it to the private handler, while Kafka requests on
it are still answered. The Connection is driven in process, through an asyncio
StreamReader fed by hand and a writer that records what is sent: no socket, no sleep."""

from __future__ import annotations

import asyncio
import functools
import struct
from pathlib import Path
from typing import Any

from acl_admin_helpers import ALICE, Kind, Op, acl, cluster_acl
from server_harness import RecordingWriter, request, run

from strom.config import load_config
from strom.metadata.acl_records import acl_record
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, decode_response, encode_request
from strom.security.acls import CLUSTER_NAME, AclBinding, AclPermissionType, PatternType
from strom.server.broker import Broker
from strom.server.connection import Connection, api_versions_body
from strom.server.contexts import node_peer
from strom.server.private import PrivateApi

NODE = "User:node"
"""A super user, as brokers are usually named."""
PEER = "User:peer"
"""A principal with CLUSTER_ACTION on the cluster from one host only."""
PEER_HOST = "10.0.0.8"
AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def broker(tmp_path: Path, *overrides: str, bindings: tuple[AclBinding, ...] = ()) -> Broker:
    """A Broker, never started, whose image holds `bindings`."""
    node = Broker(load_config(overrides=["node.id=1", f"log.dirs={tmp_path}", *overrides]))
    image = MetadataImage.empty().replay([acl_record(b) for b in bindings])
    node.metadata.reset(image, index=1, term=1)
    return node


GRANTS = (
    AclBinding(
        Kind.CLUSTER,
        CLUSTER_NAME,
        PatternType.LITERAL,
        PEER,
        PEER_HOST,
        Op.CLUSTER_ACTION,
        AclPermissionType.ALLOW,
    ),
    cluster_acl(Op.ALTER),  # alice: ALTER and DESCRIBE, not CLUSTER_ACTION
    cluster_acl(Op.DESCRIBE),
    acl(Op.ALL, "orders"),
)


def guarded_broker(tmp_path: Path) -> Broker:
    return broker(tmp_path, AUTHORIZER, f"super.users={NODE}", bindings=GRANTS)


def test_node_peer_needs_cluster_action_on_the_cluster(tmp_path: Path) -> None:
    node = guarded_broker(tmp_path)
    assert node_peer(node, NODE, "/10.0.0.1")  # a super user
    assert node_peer(node, PEER, f"/{PEER_HOST}")  # the host as a connection writes it
    assert node_peer(node, PEER, PEER_HOST)
    assert not node_peer(node, PEER, "/10.0.0.9")  # granted from another host only
    assert not node_peer(node, ALICE, "/10.0.0.1")
    assert not node_peer(node, "User:ANONYMOUS", "/10.0.0.1")


def test_node_peer_allows_anyone_without_an_authorizer(tmp_path: Path) -> None:
    node = broker(tmp_path / "plain", bindings=GRANTS)
    for principal in (ALICE, "User:ANONYMOUS", NODE):
        assert node_peer(node, principal, "/10.0.0.1")
    # With allow.everyone.if.no.acl.found, a cluster without ACLs lets anyone in.
    open_node = broker(tmp_path / "open", AUTHORIZER, "allow.everyone.if.no.acl.found=true")
    assert node_peer(open_node, ALICE, "/10.0.0.1")


# --- on a connection --------------------------------------------------------------------


def private_frame(correlation_id: int, payload: bytes) -> bytes:
    body = struct.pack(">hhi", PrivateApi.METADATA_FETCH, 0, correlation_id) + payload
    return struct.pack(">i", len(body)) + body


def api_versions(correlation_id: int) -> bytes:
    asked = request(
        ApiKey.API_VERSIONS,
        3,
        {"client_software_name": "test", "client_software_version": "1"},
    )
    return encode_request(ApiKey.API_VERSIONS, 3, correlation_id, asked.body)


def answers(written: bytes) -> list[bytes]:
    """The frames written, without their size prefixes."""
    frames, at = [], 0
    while at < len(written):
        (size,) = struct.unpack_from(">i", written, at)
        frames.append(bytes(written[at + 4 : at + 4 + size]))
        at += 4 + size
    return frames


async def served(node: Broker, principal: str, host: str, *frames: bytes) -> tuple[Any, ...]:
    """Serve `frames` on a controller-listener Connection of `principal` at `host`, until
    the connection closes: (the private payloads handled, the requests dispatched, the
    frames written, whether the writer was closed)."""
    handled: list[bytes] = []
    dispatched: list[Request] = []

    async def private(api_key: int, api_version: int, payload: bytes) -> bytes:
        handled.append(payload)
        return b"answer:" + payload

    async def dispatch(asked: Request) -> Any:
        dispatched.append(asked)
        return api_versions_body(asked.api_version)

    reader = asyncio.StreamReader()
    for frame in frames:
        reader.feed_data(frame)
    reader.feed_eof()
    writer = RecordingWriter(host)
    connection = Connection(
        reader,
        writer,  # type: ignore[arg-type]
        dispatch,
        max_request_bytes=1 << 20,
        idle_timeout_s=30,
        node_id=node.node_id,
        private=private,
        listener="CONTROLLER",
        principal=principal,
        node_peer=functools.partial(node_peer, node),
    )
    await asyncio.wait_for(connection.serve(), 5)
    return handled, dispatched, answers(bytes(writer.written)), writer.closed


def test_a_principal_without_cluster_action_cannot_send_node_to_node_frames(
    tmp_path: Path,
) -> None:
    node = guarded_broker(tmp_path)

    async def scenario() -> None:
        for principal, host in ((ALICE, "10.0.0.1"), (PEER, "10.0.0.9")):
            handled, dispatched, written, closed = await served(
                node,
                principal,
                host,
                api_versions(1),
                private_frame(2, b"first"),
                api_versions(3),  # never read: the connection closed before it
            )
            assert handled == []
            assert [r.correlation_id for r in dispatched] == [1]
            (answer,) = written  # ApiVersions, answered; nothing for the private frame
            correlation_id, body = decode_response(ApiKey.API_VERSIONS, 3, answer)
            assert (correlation_id, body.error_code) == (1, 0)
            assert closed

    run(scenario())


def test_a_node_with_cluster_action_gets_its_private_answers(tmp_path: Path) -> None:
    node = guarded_broker(tmp_path)

    async def scenario() -> None:
        for principal, host in ((NODE, "10.0.0.1"), (PEER, PEER_HOST)):
            handled, _, written, _ = await served(
                node, principal, host, private_frame(7, b"one"), private_frame(8, b"two")
            )
            assert handled == [b"one", b"two"]
            assert written == [
                struct.pack(">i", 7) + b"answer:one",
                struct.pack(">i", 8) + b"answer:two",
            ]
        plain = broker(tmp_path / "plain")  # no authorizer: any principal
        handled, _, _, _ = await served(plain, ALICE, "10.0.0.1", private_frame(9, b"x"))
        assert handled == [b"x"]

    run(scenario())
