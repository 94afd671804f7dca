"""A manual-clock driver of the pure share group coordinator, playing the shell: each
decision's records go through their bytes and are reported durable at once (unless
`hold`), and every record written is kept in `log` for replay checks."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.share.coordinator import ShareCoordinator, ShareGroupDecision
from strom.group.share.heartbeat import (
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    ShareTopic,
)
from strom.group.share.initialize import ShareInitialize
from strom.group.share.namespace import GroupType
from strom.group.share.records import (
    ShareKey,
    ShareValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
)
from strom.group.share.state import ShareGroup, replay_share


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class ShareHarness:
    def __init__(self, topics: Mapping[str, int], **config: Any) -> None:
        self.core = ShareCoordinator(ShareGroupConfig(**config))
        self.topics = {name: ShareTopic(topic_id(name), count) for name, count in topics.items()}
        self.now_ms = 1_000_000
        self.log: list[tuple[ShareKey, ShareValue | None]] = []
        self.others: dict[str, GroupType] = {}
        self.hold = False
        self.held: list[ShareGroupDecision] = []
        self.initialize = True
        """Play the share coordinator: initialize the state asked for at once."""
        self.asked: list[ShareInitialize] = []

    def other(self, group_id: str) -> GroupType | None:
        return self.others.get(group_id)

    def apply(self, decision: ShareGroupDecision) -> None:
        if not decision.records:
            return
        for key, value in decision.records:  # through the bytes, as the log holds them
            key_bytes = encode_share_key(key)
            decoded = decode_share_key(key_bytes)
            assert decoded == key and encode_share_key(decoded) == key_bytes
            if value is not None:
                value_bytes = encode_share_value(value)
                again = decode_share_value(decoded, value_bytes)
                assert again == value and encode_share_value(again) == value_bytes
        if self.hold:
            self.held.append(decision)
        else:
            self.complete(decision)

    def complete(self, decision: ShareGroupDecision) -> None:
        self.core.durable(decision.write_id)
        self.log += decision.records
        if decision.initialize is not None:
            self.asked.append(decision.initialize)
            if self.initialize:
                self.initialize_all(decision.initialize)

    def initialize_all(self, asked: ShareInitialize) -> None:
        done = {t.topic_id: t.partitions for t in asked.topics}
        self.apply(self.core.state_initialized(asked.group_id, done, self.topics, self.now_ms))

    def join(
        self, member_id: str, topics: tuple[str, ...] | None = None, **fields: Any
    ) -> ShareHeartbeatResult:
        """Join; when the join asked for share-partition state, which the harness then
        initialized, heartbeat once more to be assigned it (as a share consumer does after
        its heartbeat interval) and return that answer."""
        asked = len(self.asked)
        first = self.heartbeat(member_id, 0, topics, **fields)
        if first.error != ErrorCode.none or len(self.asked) == asked or not self.initialize:
            return first
        group_id = fields.get("group_id", "g")
        return self.heartbeat(member_id, first.member_epoch, group_id=group_id)

    def heartbeat(
        self,
        member_id: str,
        epoch: int,
        topics: tuple[str, ...] | None = None,
        group_id: str = "g",
        **fields: Any,
    ) -> ShareHeartbeatResult:
        if epoch == 0 and topics is None:
            topics = tuple(sorted(self.topics))
        req = ShareHeartbeatRequest(
            group_id, member_id, epoch, subscribed_topic_names=topics, **fields
        )
        decision = self.core.heartbeat(req, self.topics, self.now_ms, self.other)
        self.apply(decision)
        assert decision.result is not None
        return decision.result

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        for decision in self.core.tick(self.now_ms, self.topics):
            self.apply(decision)

    def replayed(self) -> dict[str, ShareGroup]:
        groups: dict[str, ShareGroup] = {}
        for key, value in self.log:
            replay_share(groups, key, value)
        return groups
