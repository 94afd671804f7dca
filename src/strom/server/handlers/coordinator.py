"""FindCoordinator: which broker coordinates a consumer group.

A group's coordinator is the leader of its `__consumer_offsets` partition. The first
group lookup creates `__consumer_offsets`. Every answer but the coordinator's endpoint
is node -1 at host "" and port -1.
Transactional ids have no coordinator in strom, and asking for one fails at once with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED instead of letting the client retry forever.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.cluster import Coordinator, FindCoordinatorResponse
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.ports import GroupContext

_GROUP = 0
_TRANSACTION = 1


async def _coordinator(context: GroupContext, key: str, key_type: int) -> Coordinator:
    entry: Coordinator = {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": ErrorCode.none,
        "error_message": None,
    }
    if key_type == _GROUP:
        try:
            await context.groups.ensure_topic()
        except CoordinatorUnavailable as exc:
            entry["error_code"] = exc.error_code
            entry["error_message"] = str(exc)
            return entry
        index = partition_for(key, context.groups.num_partitions)
        leader = context.metadata.image.brokers.get(context.groups.leader_of(index))
        if leader is None or leader.fenced:
            entry["error_code"] = ErrorCode.coordinator_not_available
            entry["error_message"] = f"{OFFSETS_TOPIC}-{index} has no leader now"
        else:
            entry["node_id"] = leader.broker_id
            entry["host"] = leader.host
            entry["port"] = leader.port
    elif key_type == _TRANSACTION:
        entry["error_code"] = ErrorCode.transactional_id_authorization_failed
        entry["error_message"] = "strom does not support transactions yet"
    else:
        entry["error_code"] = ErrorCode.invalid_request
        entry["error_message"] = f"unknown coordinator key type {key_type}"
    return entry


async def handle_find_coordinator(context: GroupContext, request: Request) -> Any:
    body = request.body
    key_type = int(getattr(body, "key_type", _GROUP))
    if request.api_version >= 4:
        coordinators = [await _coordinator(context, key, key_type) for key in body.coordinator_keys]
    else:
        coordinators = [await _coordinator(context, body.key, key_type)]
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
