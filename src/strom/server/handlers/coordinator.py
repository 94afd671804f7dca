"""FindCoordinator: which broker coordinates a consumer group or a transactional id.

A group's coordinator is the leader of its `__consumer_offsets` partition, a
transactional id's the leader of its `__transaction_state` partition; both partitions
are picked with Kafka's rule (group/placement.py), so an id lives in the same partition
number on strom as on Kafka. The first lookup of either kind creates its topic; until
it has a live leader the answer is COORDINATOR_NOT_AVAILABLE and the client retries.
Every answer but the coordinator's endpoint is node -1 at host "" and port -1. v4+ look
up a batch of keys; earlier versions one, answered at the top level.

With an authorizer each key is checked first, as Kafka's KafkaApis does, so that a key
the principal may not look up creates no topic: a group needs DESCRIBE on it (else
GROUP_AUTHORIZATION_FAILED), a transactional id DESCRIBE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), a share-partition (key type 2, v6) CLUSTER_ACTION
on the cluster (else CLUSTER_AUTHORIZATION_FAILED).

A share key (type 2, v6+: share-partition leaders looking for the share coordinator) is
"<group id>:<topic id>:<partition>" and is answered with the leader of its
`__share_group_state` partition (share/placement.py); one that does not parse, or a
share key below v6, is INVALID_REQUEST, as Kafka answers.

Every error carries Kafka's default text for its code as its message, in the v0-v3 answer
and in each v4+ entry alike; a coordinator found carries none (null). Kafka's v0-v3
answers send that text too; its v4+ entries leave it empty except when the whole request
fails, and its v1-v3 answers name "NONE" where there is no error: strom sends the text
for every error and null for none, which clients read the same.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import partition_for
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.cluster import Coordinator, FindCoordinatorResponse
from strom.security.operations import AclOperation, AclResourceType
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.handlers.ports import TxnContext
from strom.server.share_coordinator import ShareCoordinatorUnavailable
from strom.server.transactions import TxnUnavailable
from strom.share.placement import parse_share_coordinator_key, share_state_partition

_GROUP = 0
_TRANSACTION = 1
_SHARE = 2
_BATCHED_VERSION = 4
_SHARE_VERSION = 6
_MESSAGES = {
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.coordinator_load_in_progress: (
        "The coordinator is loading and hence can't process requests."
    ),
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library "
        "or the message was sent to an incompatible broker. See the broker logs for more "
        "details."
    ),
}
"""Kafka's default text of each error FindCoordinator answers with (its Errors table)."""


def _failed(entry: Coordinator, error: ErrorCode) -> Coordinator:
    """`entry` answering `error`, with Kafka's text for it."""
    entry["error_code"] = error
    entry["error_message"] = _MESSAGES.get(error, error.name)
    return entry


def _refused(access: Access, key: str, key_type: int, version: int) -> ErrorCode | None:
    """The error when the principal may not look `key` up; None when it may."""
    if key_type == _GROUP:
        allowed = access.allows(AclOperation.DESCRIBE, AclResourceType.GROUP, key)
        return None if allowed else ErrorCode.group_authorization_failed
    if key_type == _TRANSACTION:
        allowed = access.allows(AclOperation.DESCRIBE, AclResourceType.TRANSACTIONAL_ID, key)
        return None if allowed else ErrorCode.transactional_id_authorization_failed
    if key_type == _SHARE and version >= _SHARE_VERSION:
        allowed = access.allows_cluster(AclOperation.CLUSTER_ACTION)
        return None if allowed else ErrorCode.cluster_authorization_failed
    return None


async def _coordinator(
    context: TxnContext, access: Access, key: str, key_type: int, request: Request
) -> Coordinator:
    entry: Coordinator = {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": ErrorCode.none,
        "error_message": "NONE",  # Kafka's Errors.NONE.message(), on every success
    }
    refused = _refused(access, key, key_type, request.api_version)
    if refused is not None:
        return _failed(entry, refused)
    try:
        if key_type == _GROUP:
            groups = context.groups
            await groups.ensure_topic()
            leader_id = groups.leader_of(partition_for(key, groups.num_partitions))
        elif key_type == _TRANSACTION:
            txns = context.txns
            await txns.ensure_topic()
            leader_id = txns.leader_of(partition_for(key, txns.num_partitions))
        elif key_type == _SHARE and request.api_version >= _SHARE_VERSION:
            parsed = parse_share_coordinator_key(key)
            shares = context.shares
            if parsed is None or shares is None:
                return _failed(entry, ErrorCode.invalid_request)
            await shares.ensure_topic()
            leader_id = shares.leader_of(share_state_partition(*parsed, shares.num_partitions))
        else:  # no such key type, or a share key below v6
            return _failed(entry, ErrorCode.invalid_request)
    except (CoordinatorUnavailable, TxnUnavailable, ShareCoordinatorUnavailable) as exc:
        return _failed(entry, exc.error_code)
    leader = context.metadata.image.brokers.get(leader_id)
    address = None if leader is None else leader.address(request.listener or None)
    if leader is None or leader.fenced or address is None:  # no leader, or not on this listener
        return _failed(entry, ErrorCode.coordinator_not_available)
    entry["node_id"] = leader.broker_id
    entry["host"], entry["port"] = address
    return entry


async def handle_find_coordinator(context: TxnContext, request: Request) -> Any:
    body = request.body
    key_type = int(getattr(body, "key_type", _GROUP))
    access = Access.of(context.authorizer(), request)
    if request.api_version >= _BATCHED_VERSION:
        coordinators = [
            await _coordinator(context, access, key, key_type, request)
            for key in body.coordinator_keys
        ]
    else:
        coordinators = [await _coordinator(context, access, body.key, key_type, request)]
    # v0-v3 answer their one key at the top level, v4+ in `coordinators`; the codec
    # keeps what the asked version has.
    first = coordinators[0] if coordinators else None
    response: FindCoordinatorResponse = {
        "throttle_time": 0,
        "error_code": first["error_code"] if first else ErrorCode.none,
        "error_message": first["error_message"] if first else None,
        "node_id": first["node_id"] if first else -1,
        "host": first["host"] if first else "",
        "port": first["port"] if first else -1,
        "coordinators": coordinators,
    }
    return build_response(ApiKey.FIND_COORDINATOR, request.api_version, response)
