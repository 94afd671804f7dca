"""One namespace for every group type: a group id names a classic, a consumer or a share
group, never two, and no request turns a share group into another type (Kafka converts
between classic and consumer groups only). What Kafka's GroupMetadataManager answers when
a request meets a group of another type:

- ShareGroupHeartbeat or ShareGroupDescribe meeting a classic or consumer group:
  GROUP_ID_NOT_FOUND, "Group <id> is not a share group."
- ConsumerGroupHeartbeat/Describe, OffsetCommit, TxnOffsetCommit, OffsetFetch by a
  member, OffsetDelete meeting a share group: GROUP_ID_NOT_FOUND, "Group <id> is not a
  consumer group."
- JoinGroup meeting a share group: INCONSISTENT_GROUP_PROTOCOL, member id "".
- SyncGroup meeting a share group: UNKNOWN_MEMBER_ID.
- Heartbeat or LeaveGroup meeting a share group: UNKNOWN_MEMBER_ID, "Group <id> not
  found."

The shell asks `share_group_conflict` before it hands a request of another protocol to
its core, and gives the share coordinator a `GroupType` lookup of the other cores.
"""

from __future__ import annotations

from enum import Enum

from kio.schema.errors import ErrorCode

__all__ = ["GroupRequest", "GroupType", "group_type_error", "share_group_conflict"]


class GroupType(Enum):
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"


class GroupRequest(Enum):
    """A request of another protocol that may meet a share group."""

    CONSUMER_GROUP = "consumer group"
    """ConsumerGroupHeartbeat/Describe, OffsetCommit, TxnOffsetCommit, OffsetFetch by a
    member, OffsetDelete."""
    JOIN_GROUP = "JoinGroup"
    SYNC_GROUP = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    LEAVE_GROUP = "LeaveGroup"


def group_type_error(group_id: str, wanted: GroupType) -> tuple[ErrorCode, str]:
    """GROUP_ID_NOT_FOUND: the group is not of the type the request needs."""
    return ErrorCode.group_id_not_found, f"Group {group_id} is not a {wanted.value} group."


def share_group_conflict(group_id: str, request: GroupRequest) -> tuple[ErrorCode, str | None]:
    """The answer to `request` for a group id that names a share group."""
    if request is GroupRequest.CONSUMER_GROUP:
        return group_type_error(group_id, GroupType.CONSUMER)
    if request is GroupRequest.JOIN_GROUP:
        return ErrorCode.inconsistent_group_protocol, None
    if request is GroupRequest.SYNC_GROUP:
        return ErrorCode.unknown_member_id, None
    return ErrorCode.unknown_member_id, f"Group {group_id} not found."
