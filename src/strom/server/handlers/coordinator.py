"""FindCoordinator: which broker coordinates a consumer group.

A group's coordinator is the leader of its `__consumer_offsets` partition. The first
group lookup creates `__consumer_offsets`.
Transactional ids have no coordinator in strom, and asking for one fails at once with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED instead of letting the client retry forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.server.groups import CoordinatorUnavailable

if TYPE_CHECKING:
    from strom.server.broker import Broker

_GROUP = 0
_TRANSACTION = 1


async def _coordinator(broker: Broker, key: str, key_type: int) -> dict[str, Any]:
    host, port = broker.advertised_listener
    entry: dict[str, Any] = {
        "key": key,
        "node_id": broker.node_id,
        "host": host,
        "port": port,
        "error_code": ErrorCode.none,
        "error_message": None,
    }
    if key_type == _GROUP:
        try:
            await broker.groups.ensure_topic()
        except CoordinatorUnavailable as exc:
            entry.update(node_id=-1, host="", port=-1, error_code=exc.error_code)
            entry["error_message"] = str(exc)
            return entry
        index = partition_for(key, broker.groups.num_partitions)
        leader = broker.image.brokers.get(broker.groups.leader_of(index))
        if leader is None or leader.fenced:
            entry.update(node_id=-1, host="", port=-1)
            entry["error_code"] = ErrorCode.coordinator_not_available
            entry["error_message"] = f"{OFFSETS_TOPIC}-{index} has no leader now"
        else:
            entry.update(node_id=leader.broker_id, host=leader.host, port=leader.port)
    else:
        entry.update(node_id=-1, host="", port=-1)
        if key_type == _TRANSACTION:
            entry["error_code"] = ErrorCode.transactional_id_authorization_failed
            entry["error_message"] = "strom does not support transactions yet"
        else:
            entry["error_code"] = ErrorCode.invalid_request
            entry["error_message"] = f"unknown coordinator key type {key_type}"
    return entry


async def handle_find_coordinator(broker: Broker, request: Request) -> Any:
    body = request.body
    key_type = int(getattr(body, "key_type", _GROUP))
    if request.api_version >= 4:
        coordinators = [await _coordinator(broker, key, key_type) for key in body.coordinator_keys]
        data: dict[str, Any] = {"throttle_time": 0, "coordinators": coordinators}
    else:
        data = {"throttle_time": 0, **(await _coordinator(broker, body.key, key_type))}
    return build_response(ApiKey.FIND_COORDINATOR, request.api_version, data)
