"""A manual-clock driver of the pure consumer group coordinator, playing the shell: each
decision's records are encoded, decoded and reported durable at once (unless `hold`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from random import Random
from typing import Any

from strom.group.consumer.coordinator import ConsumerCoordinator, ConsumerDecision
from strom.group.consumer.heartbeat import (
    ConsumerGroupConfig,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    TopicInfo,
)
from strom.group.consumer.records import (
    ConsumerKey,
    ConsumerValue,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)

EMPTY: Mapping[uuid.UUID, frozenset[int]] = {}


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


class ConsumerHarness:
    def __init__(self, topics: Mapping[str, int], seed: int = 1, **config: Any) -> None:
        self.core = ConsumerCoordinator(ConsumerGroupConfig(**config), Random(seed))
        self.topics = {name: TopicInfo(topic_id(name), count) for name, count in topics.items()}
        self.now_ms = 1_000_000
        self.log: list[tuple[ConsumerKey, ConsumerValue | None]] = []
        self.hold = False
        self.held: list[int] = []

    def names(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self.topics.items()}

    def _apply(self, decision: ConsumerDecision) -> None:
        if not decision.records:
            return
        for key, value in decision.records:  # through the bytes, as the log holds them
            decoded = decode_consumer_key(encode_consumer_key(key))
            assert decoded == key
            if value is not None:
                assert decode_consumer_value(decoded, encode_consumer_value(value)) == value
        if self.hold:
            self.held.append(decision.write_id)
        else:
            self.complete(decision.write_id, decision)

    def complete(self, write_id: int, decision: ConsumerDecision | None = None) -> None:
        self.core.durable(write_id)
        if decision is not None:
            self.log += decision.records

    def heartbeat(
        self,
        member_id: str,
        epoch: int,
        *,
        topics: tuple[str, ...] | None = None,
        owned: Mapping[uuid.UUID, frozenset[int]] | None = None,
        group: str = "g",
        **fields: Any,
    ) -> ConsumerHeartbeatResult:
        if epoch == 0:
            fields.setdefault("rebalance_timeout_ms", 30_000)
            if owned is None:
                owned = EMPTY
            if topics is None and "subscribed_topic_regex" not in fields:
                topics = tuple(self.topics)
        req = ConsumerHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            subscribed_topic_names=topics,
            owned=owned,
            **fields,
        )
        decision = self.core.heartbeat(req, self.topics, self.now_ms)
        self._apply(decision)
        assert decision.result is not None
        return decision.result

    def tick(self, advance_ms: int = 0) -> list[ConsumerDecision]:
        self.now_ms += advance_ms
        decisions = self.core.tick(self.now_ms, self.topics)
        for decision in decisions:
            self._apply(decision)
        return decisions

    def replayed(self) -> ConsumerCoordinator:
        """A new coordinator loaded from every committed record."""
        other = ConsumerCoordinator(self.core.config, Random(0))
        for key, value in self.log:
            other.load(key, value, self.now_ms)
        other.loaded(lambda _: True)
        return other
