"""The group.consumer.* settings of KIP-848 consumer groups, as the consumer group
coordinator takes them: its server assignors (each one strom has, the first the
default), the broker-wide session timeout and heartbeat interval (a group's own
`consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` override them; their
bounds are checked with the other group keys, group_configs.py), the most members, and
which way a group may move between the protocols (`group.consumer.migration.policy`).
The group.share.* settings of KIP-932 share groups likewise (`share_group_config`)."""

from __future__ import annotations

from strom.config.schema import invalid_value
from strom.config.typed_values import TypedValues
from strom.group.consumer.assignors import ASSIGNORS
from strom.group.consumer.heartbeat import ConsumerGroupConfig, MigrationPolicy
from strom.group.share.assignor import SIMPLE_ASSIGNOR
from strom.group.share.heartbeat import ShareGroupConfig

__all__ = ["consumer_group_config", "share_group_config"]


def consumer_group_config(v: TypedValues) -> ConsumerGroupConfig:
    assignors = tuple(
        name.strip() for name in v.strings("group.consumer.assignors") if name.strip()
    )
    if not assignors:
        raise invalid_value("group.consumer.assignors", "", "must name at least one assignor")
    unknown = [name for name in assignors if name not in ASSIGNORS]
    if unknown:
        raise invalid_value(
            "group.consumer.assignors",
            ",".join(assignors),
            f"unknown assignor(s) {', '.join(unknown)}; strom has {', '.join(ASSIGNORS)}",
        )
    return ConsumerGroupConfig(
        assignors=assignors,
        session_timeout_ms=v.integer("group.consumer.session.timeout.ms"),
        heartbeat_interval_ms=v.integer("group.consumer.heartbeat.interval.ms"),
        max_size=v.integer("group.consumer.max.size"),
        migration_policy=MigrationPolicy(v.string("group.consumer.migration.policy").lower()),
        classic_max_size=v.integer("group.max.size"),
    )


def share_group_config(v: TypedValues) -> ShareGroupConfig:
    assignors = tuple(name.strip() for name in v.strings("group.share.assignors") if name.strip())
    if assignors != (SIMPLE_ASSIGNOR,):
        raise invalid_value(
            "group.share.assignors",
            ",".join(assignors),
            f"strom's share groups have one assignor: {SIMPLE_ASSIGNOR}",
        )
    return ShareGroupConfig(
        session_timeout_ms=v.integer("group.share.session.timeout.ms"),
        heartbeat_interval_ms=v.integer("group.share.heartbeat.interval.ms"),
        max_size=v.integer("group.share.max.size"),
        assignor=SIMPLE_ASSIGNOR,
        initialize_retry_interval_ms=v.integer("group.share.initialize.retry.interval.ms"),
    )
