"""The response a broker would send if a request failed with one error everywhere.

For a test fixture that injects failures between a client and strom ("the next three
Produce requests fail with NOT_LEADER_OR_FOLLOWER"): `error_response(request, error)` is
a kio response of the request's API and version, ready for
`strom.protocol.codec.encode_response(request.correlation_id, ...)`, shaped so clients
act on it as they would on a real broker's failure.

It follows Kafka's `AbstractRequest.getErrorResponse` of each API (apache/kafka
`clients/.../common/requests/*Request.java`): the response names every topic, partition,
group, resource or coordinator key the request named, with the error in each, and
Kafka's "unknown" values beside it (offsets -1, no producer id, generation -1, the
no-node coordinator -1/""/-1, no brokers in Metadata). Throttle time is always 0. Where
Kafka's version sends only a top-level error, this one also echoes the request's
entries with the error, so that every error code in the response carries it (clients
read the top-level error first and ignore the rest): Fetch v13+ (Kafka sends no
partitions), OffsetFetch v2+ (no topics), OffsetDelete (no topics) and LeaveGroup v3+
(no members). Metadata v13's top-level error code also carries the error (Kafka leaves
it 0); JoinGroup echoes the request's member id (Kafka sends ""); Fetch echoes the
request's session id, as Kafka does. Error messages are left null.

Any other API strom serves gets the generic response of `strom.testing.neutral.fill`:
the error in every error code, Kafka's defaults everywhere else, arrays empty.

A Produce request with acks=0 gets a response too, although Kafka sends none: whether to
send it is the caller's decision (a broker never answers acks=0, so a fixture that does
breaks the client's correlation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.codec import Request, response_class
from strom.testing.neutral import fill

__all__ = ["error_response"]

_Data = dict[str, Any]
_Builder = Callable[[Any, int, ErrorCode], _Data]

_NO_OFFSET = -1
_NO_EPOCH = -1
_NO_NODE = {"node_id": -1, "host": "", "port": -1}
_AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def error_response(request: Request, error: ErrorCode) -> Any:
    """The response to `request` failing with `error`: a kio object of its API and version."""
    builder = _BUILDERS.get(request.api_key)
    data = {} if builder is None else builder(request.body, request.api_version, error)
    return fill(response_class(request.api_key, request.api_version), data, error)


def _each(items: Iterable[Any] | None) -> Iterable[Any]:
    """The items of an array field that may be null."""
    return () if items is None else items


# --- produce and fetch ---------------------------------------------------------------


def _produce(body: Any, version: int, error: ErrorCode) -> _Data:
    return {
        "responses": [
            {
                "name": topic.name,
                "partition_responses": [
                    {
                        "index": partition.index,
                        "base_offset": _NO_OFFSET,
                        "log_append_time": -1,
                        "log_start_offset": _NO_OFFSET,
                        "record_errors": [],
                    }
                    for partition in topic.partition_data
                ],
            }
            for topic in body.topic_data
        ]
    }


def _fetch(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka (FetchRequest.getErrorResponse): the top-level error (v7+), the request's
    # session id, and before v13 every partition with the error. From v13 Kafka sends no
    # partitions; this echoes them by topic id as well (see the module docstring).
    return {
        "session_id": getattr(body, "session_id", 0),
        "responses": [
            {
                "topic": getattr(topic, "topic", ""),
                "topic_id": getattr(topic, "topic_id", None),
                "partitions": [
                    {
                        "partition_index": partition.partition,
                        "high_watermark": _NO_OFFSET,
                        "last_stable_offset": _NO_OFFSET,
                        "log_start_offset": _NO_OFFSET,
                        "aborted_transactions": None,
                        "records": None,
                    }
                    for partition in topic.partitions
                ],
            }
            for topic in body.topics
        ],
    }


def _list_offsets(body: Any, version: int, error: ErrorCode) -> _Data:
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": partition.partition_index,
                        "timestamp": -1,
                        "offset": _NO_OFFSET,
                        "leader_epoch": _NO_EPOCH,
                    }
                    for partition in topic.partitions
                ],
            }
            for topic in body.topics
        ]
    }


def _offset_for_leader_epoch(body: Any, version: int, error: ErrorCode) -> _Data:
    return {
        "topics": [
            {
                "topic": topic.topic,
                "partitions": [
                    {
                        "partition": partition.partition,
                        "leader_epoch": _NO_EPOCH,
                        "end_offset": _NO_OFFSET,
                    }
                    for partition in topic.partitions
                ],
            }
            for topic in body.topics
        ]
    }


def _init_producer_id(body: Any, version: int, error: ErrorCode) -> _Data:
    return {"producer_id": -1, "producer_epoch": -1}


# --- cluster -------------------------------------------------------------------------


def _metadata(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka: each requested topic with the error and no partitions, no brokers; a null
    # topic name (v12+ asks by id) is answered as "".
    return {
        "brokers": [],
        "controller_id": -1,
        "topics": [
            {
                "name": topic.name or "",
                "topic_id": getattr(topic, "topic_id", None),
                "is_internal": False,
                "partitions": [],
            }
            for topic in _each(body.topics)
        ],
    }


def _find_coordinator(body: Any, version: int, error: ErrorCode) -> _Data:
    # v0-v3 answer one key at the top level, v4+ each key in `coordinator_keys`.
    if version < 4:
        return dict(_NO_NODE)
    return {"coordinators": [{"key": key, **_NO_NODE} for key in body.coordinator_keys]}


def _api_versions(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka (KIP-511): an UNSUPPORTED_VERSION answer lists ApiVersions' own range, so the
    # client can retry at a version the broker speaks; any other error lists nothing.
    if error is not ErrorCode.unsupported_version:
        return {"api_keys": []}
    served = SUPPORTED_APIS[ApiKey.API_VERSIONS]
    return {
        "api_keys": [
            {
                "api_key": int(ApiKey.API_VERSIONS),
                "min_version": served.min_version,
                "max_version": served.max_version,
            }
        ]
    }


# --- topics and configs --------------------------------------------------------------


def _create_topics(body: Any, version: int, error: ErrorCode) -> _Data:
    return {"topics": [{"name": topic.name} for topic in body.topics]}


def _delete_topics(body: Any, version: int, error: ErrorCode) -> _Data:
    if version < 6:
        return {"responses": [{"name": name} for name in body.topic_names]}
    return {
        "responses": [{"name": topic.name, "topic_id": topic.topic_id} for topic in body.topics]
    }


def _create_partitions(body: Any, version: int, error: ErrorCode) -> _Data:
    return {"results": [{"name": topic.name} for topic in body.topics]}


def _config_resources(body: Any) -> list[_Data]:
    return [
        {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
        for resource in body.resources
    ]


def _describe_configs(body: Any, version: int, error: ErrorCode) -> _Data:
    return {"results": _config_resources(body)}


def _alter_configs(body: Any, version: int, error: ErrorCode) -> _Data:
    return {"responses": _config_resources(body)}


def _alter_partition_reassignments(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka: the top-level error and each requested partition with it.
    return {
        "responses": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": partition.partition_index} for partition in topic.partitions
                ],
            }
            for topic in body.topics
        ]
    }


def _list_partition_reassignments(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka: the top-level error; each requested partition listed with no replicas (the
    # partition entries have no error code).
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [{"partition_index": index} for index in topic.partition_indexes],
            }
            for topic in _each(body.topics)
        ]
    }


# --- groups and offsets --------------------------------------------------------------


def _offset_commit(body: Any, version: int, error: ErrorCode) -> _Data:
    return {
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": partition.partition_index} for partition in topic.partitions
                ],
            }
            for topic in body.topics
        ]
    }


def _fetched_topics(topics: Iterable[Any] | None) -> list[_Data]:
    return [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": index,
                    "committed_offset": _NO_OFFSET,
                    "committed_leader_epoch": _NO_EPOCH,
                    "metadata": "",
                }
                for index in topic.partition_indexes
            ],
        }
        for topic in _each(topics)
    ]


def _offset_fetch(body: Any, version: int, error: ErrorCode) -> _Data:
    # v1-v7: one group; v2+ also carry the top-level error (set by `fill`), which is all
    # Kafka sends from v2. v8+: each requested group with the error (Kafka sends no
    # topics in them; a null topic list asks for all and is answered with none).
    if version < 8:
        return {"topics": _fetched_topics(body.topics)}
    return {
        "groups": [
            {"group_id": group.group_id, "topics": _fetched_topics(group.topics)}
            for group in body.groups
        ]
    }


def _offset_delete(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka sends only the top-level error; the partitions are echoed with it too.
    return _offset_commit(body, version, error)


def _join_group(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka: generation -1, no leader, no members, protocol name null from v7 ("" before).
    return {
        "generation_id": -1,
        "protocol_name": None if version >= 7 else "",
        "leader": "",
        "member_id": body.member_id,
        "members": [],
    }


def _leave_group(body: Any, version: int, error: ErrorCode) -> _Data:
    # v0-v2 name one member and answer at the top level; v3+ name members in a batch,
    # echoed here with the error (Kafka sends only the top-level error).
    return {
        "members": [
            {"member_id": member.member_id, "group_instance_id": member.group_instance_id}
            for member in getattr(body, "members", ())
        ]
    }


def _describe_groups(body: Any, version: int, error: ErrorCode) -> _Data:
    # Kafka's DescribeGroupsResponse.groupError: unknown state, protocol type and
    # protocol all "", no members, authorized operations omitted.
    return {
        "groups": [
            {
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
                "authorized_operations": _AUTHORIZED_OPERATIONS_OMITTED,
            }
            for group_id in body.groups
        ]
    }


def _delete_groups(body: Any, version: int, error: ErrorCode) -> _Data:
    return {"results": [{"group_id": group_id} for group_id in body.groups_names]}


_BUILDERS: dict[ApiKey, _Builder] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.API_VERSIONS: _api_versions,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _list_partition_reassignments,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
}
"""The APIs whose answer names what the request named or needs Kafka's "unknown" values;
the rest (SyncGroup, Heartbeat, ListGroups, DescribeCluster, DescribeQuorum and the
controller APIs) get the generic error response, which is what Kafka sends for them: the
error, empty arrays (no assignment, no groups, no brokers, no quorum) and defaults."""
