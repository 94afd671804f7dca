"""The broker keys of what the cluster holds: topic defaults and replication, consumer
groups with their `__consumer_offsets` topic, and transactions with their
`__transaction_state` topic.

Kafka's names and (unless noted) Kafka's defaults; `keys` assembles every key.
"""

from __future__ import annotations

from strom.config.schema import AtLeast, Between, ConfigKey, ConfigType, OneOf

__all__ = ["GROUP_KEYS", "REPLICATION_KEYS", "TXN_KEYS"]

INT = ConfigType.INT
LONG = ConfigType.LONG
BOOLEAN = ConfigType.BOOLEAN

_REPLICATION_FACTOR = Between(1, 32767)

REPLICATION_KEYS: tuple[ConfigKey, ...] = (
    # --- topics
    ConfigKey(
        "num.partitions", INT, "1", "Partitions of an automatically created topic.", AtLeast(1)
    ),
    ConfigKey(
        "default.replication.factor",
        INT,
        "1",
        "Replication factor of automatically created topics.",
        _REPLICATION_FACTOR,
    ),
    ConfigKey(
        "auto.create.topics.enable",
        BOOLEAN,
        "true",
        "Create a topic when a client asks for one that does not exist.",
    ),
    ConfigKey("delete.topic.enable", BOOLEAN, "true", "Allow deleting topics."),
    ConfigKey(
        "min.insync.replicas",
        INT,
        "1",
        "Replicas that must have a write for an acks=all produce to succeed.",
        AtLeast(1),
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        BOOLEAN,
        "false",
        "Allow a replica outside the ISR to become leader, losing data.",
    ),
    ConfigKey(
        "auto.leader.rebalance.enable",
        BOOLEAN,
        "true",
        "Move leadership back to each partition's preferred replica once it is in sync.",
    ),
    ConfigKey(
        "leader.imbalance.check.interval.seconds",
        LONG,
        "300",
        "How often the controller checks whether preferred replicas should lead again.",
        AtLeast(1),
    ),
    ConfigKey(
        "leader.imbalance.per.broker.percentage",
        INT,
        "10",
        "Share of a broker's preferred partitions led elsewhere that triggers rebalancing.",
        Between(0, 100),
    ),
    ConfigKey(
        "replica.lag.time.max.ms",
        LONG,
        "30000",
        "A follower that has not caught up for this long leaves the ISR.",
        AtLeast(1),
    ),
    ConfigKey(
        "replica.fetch.max.bytes",
        INT,
        "1048576",
        "Bytes a follower asks for per partition in one fetch (at least one batch comes).",
        AtLeast(1),
    ),
    ConfigKey(
        "replica.fetch.response.max.bytes",
        INT,
        "10485760",
        "Bytes a follower asks for in one fetch, over all its partitions.",
        AtLeast(1),
    ),
    ConfigKey(
        "replica.fetch.wait.max.ms",
        INT,
        "500",
        "How long a follower's fetch waits at the leader for new records.",
        AtLeast(0),
    ),
    ConfigKey(
        "replica.fetch.backoff.ms",
        INT,
        "1000",
        "How long a follower waits before fetching again after an error.",
        AtLeast(0),
    ),
    ConfigKey(
        "replica.high.watermark.checkpoint.interval.ms",
        LONG,
        "5000",
        "How often the high watermarks are written to replication-offset-checkpoint.",
        AtLeast(1),
    ),
)

GROUP_KEYS: tuple[ConfigKey, ...] = (
    # --- consumer groups
    ConfigKey(
        "offsets.topic.num.partitions", INT, "50", "Partitions of __consumer_offsets.", AtLeast(1)
    ),
    ConfigKey(
        "offsets.topic.replication.factor",
        INT,
        "1",
        "Replication factor of __consumer_offsets (Kafka: 3).",
        _REPLICATION_FACTOR,
    ),
    ConfigKey(
        "offsets.topic.segment.bytes",
        INT,
        "104857600",
        "Segment size of __consumer_offsets (kept small so compaction can work).",
        Between(14, 2**31 - 1),
    ),
    ConfigKey(
        "offset.metadata.max.bytes",
        INT,
        "4096",
        "Largest metadata string a consumer may commit with an offset.",
        AtLeast(0),
    ),
    ConfigKey(
        "group.max.size",
        INT,
        str(2**31 - 1),
        "Most members a consumer group may have.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.consumer.assignors",
        ConfigType.LIST,
        "uniform,range",
        "Server assignors of consumer groups (KIP-848), the first the default: uniform, range.",
    ),
    ConfigKey(
        "group.consumer.migration.policy",
        ConfigType.STRING,
        "bidirectional",
        "How a live group may move between the classic and consumer protocols.",
        OneOf(("bidirectional", "upgrade", "downgrade", "disabled")),
    ),
    ConfigKey(
        "group.consumer.max.size",
        INT,
        str(2**31 - 1),
        "Most members a consumer group (KIP-848) may have.",
        AtLeast(1),
    ),
    ConfigKey(
        "offsets.retention.minutes",
        INT,
        "10080",
        "Committed offsets of an empty group are kept this long.",
        AtLeast(1),
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms",
        LONG,
        "600000",
        "Time between checks for expired offsets.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.initial.rebalance.delay.ms",
        INT,
        "3000",
        "Time the first rebalance of a new group waits for more members.",
        AtLeast(0),
    ),
    ConfigKey(
        "group.min.session.timeout.ms",
        INT,
        "6000",
        "Smallest session timeout a consumer may ask for.",
        AtLeast(0),
    ),
    ConfigKey(
        "group.max.session.timeout.ms",
        INT,
        "1800000",
        "Largest session timeout a consumer may ask for.",
        AtLeast(0),
    ),
    # --- per-group overrides' defaults and bounds (group_configs.py), Kafka's
    ConfigKey(
        "group.consumer.session.timeout.ms",
        INT,
        "45000",
        "A consumer group's consumer.session.timeout.ms unless the group has its own.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.consumer.min.session.timeout.ms",
        INT,
        "45000",
        "Smallest consumer.session.timeout.ms a consumer group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.consumer.max.session.timeout.ms",
        INT,
        "60000",
        "Largest consumer.session.timeout.ms a consumer group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.consumer.heartbeat.interval.ms",
        INT,
        "5000",
        "A consumer group's consumer.heartbeat.interval.ms unless the group has its own.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.consumer.min.heartbeat.interval.ms",
        INT,
        "5000",
        "Smallest consumer.heartbeat.interval.ms a consumer group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.consumer.max.heartbeat.interval.ms",
        INT,
        "15000",
        "Largest consumer.heartbeat.interval.ms a consumer group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.enable",
        BOOLEAN,
        "true",
        "Serve share groups (KIP-932) and their APIs.",
    ),
    ConfigKey(
        "group.share.max.size",
        INT,
        "200",
        "Most members a share group may have.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.assignors",
        ConfigType.LIST,
        "simple",
        "Server assignors of share groups, the first the one used: simple.",
    ),
    ConfigKey(
        "group.share.initialize.retry.interval.ms",
        INT,
        "30000",
        "Wait for a share-partition's state to be initialized before asking again.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.session.timeout.ms",
        INT,
        "45000",
        "A share group's share.session.timeout.ms unless the group has its own.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.min.session.timeout.ms",
        INT,
        "45000",
        "Smallest share.session.timeout.ms a share group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.max.session.timeout.ms",
        INT,
        "60000",
        "Largest share.session.timeout.ms a share group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.heartbeat.interval.ms",
        INT,
        "5000",
        "A share group's share.heartbeat.interval.ms unless the group has its own.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.min.heartbeat.interval.ms",
        INT,
        "5000",
        "Smallest share.heartbeat.interval.ms a share group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.max.heartbeat.interval.ms",
        INT,
        "15000",
        "Largest share.heartbeat.interval.ms a share group may be given.",
        AtLeast(1),
    ),
    ConfigKey(
        "group.share.record.lock.duration.ms",
        INT,
        "30000",
        "A share group's share.record.lock.duration.ms unless the group has its own.",
        AtLeast(1000),
    ),
    ConfigKey(
        "group.share.min.record.lock.duration.ms",
        INT,
        "15000",
        "Smallest share.record.lock.duration.ms a share group may be given.",
        AtLeast(1000),
    ),
    ConfigKey(
        "group.share.max.record.lock.duration.ms",
        INT,
        "60000",
        "Largest share.record.lock.duration.ms a share group may be given.",
        AtLeast(1000),
    ),
    ConfigKey(
        "group.share.delivery.count.limit",
        INT,
        "5",
        "A share group's share.delivery.count.limit unless the group has its own.",
        AtLeast(2),
    ),
    ConfigKey(
        "group.share.min.delivery.count.limit",
        INT,
        "2",
        "Smallest share.delivery.count.limit a share group may be given.",
        AtLeast(2),
    ),
    ConfigKey(
        "group.share.max.delivery.count.limit",
        INT,
        "10",
        "Largest share.delivery.count.limit a share group may be given.",
        AtLeast(2),
    ),
    ConfigKey(
        "group.share.partition.max.record.locks",
        INT,
        "2000",
        "A share group's share.partition.max.record.locks unless the group has its own.",
        AtLeast(100),
    ),
    ConfigKey(
        "group.share.min.partition.max.record.locks",
        INT,
        "100",
        "Smallest share.partition.max.record.locks a share group may be given.",
        AtLeast(100),
    ),
    ConfigKey(
        "group.share.max.partition.max.record.locks",
        INT,
        "4000",
        "Largest share.partition.max.record.locks a share group may be given.",
        AtLeast(100),
    ),
    ConfigKey(
        "group.share.max.share.sessions",
        INT,
        "2000",
        "Share sessions (ShareFetch) a broker keeps at most.",
        AtLeast(1),
    ),
    ConfigKey(
        "strom.share.delivery.delay.ms",
        LONG,
        "0",
        "A topic's strom.share.delivery.delay.ms unless the topic has its own.",
        AtLeast(0),
    ),
    ConfigKey(
        "strom.share.redelivery.backoff.ms",
        LONG,
        "0",
        "A topic's strom.share.redelivery.backoff.ms unless the topic has its own.",
        AtLeast(0),
    ),
    ConfigKey(
        "strom.share.redelivery.backoff.max.ms",
        LONG,
        "60000",
        "A topic's strom.share.redelivery.backoff.max.ms unless the topic has its own.",
        AtLeast(0),
    ),
    ConfigKey(
        "strom.share.dead.letter.copy.timeout.ms",
        LONG,
        "5000",
        "How long a dead letter's copy is retried before its records are archived anyway.",
        AtLeast(0),
    ),
)

TXN_KEYS: tuple[ConfigKey, ...] = (
    # --- transactions
    ConfigKey(
        "transaction.state.log.num.partitions",
        INT,
        "50",
        "Partitions of __transaction_state.",
        AtLeast(1),
    ),
    ConfigKey(
        "transaction.state.log.replication.factor",
        INT,
        "3",
        "Replication factor of __transaction_state, capped at the brokers registered.",
        _REPLICATION_FACTOR,
    ),
    ConfigKey(
        "transaction.state.log.min.isr",
        INT,
        "2",
        "min.insync.replicas of __transaction_state, capped at its replication factor.",
        AtLeast(1),
    ),
    ConfigKey(
        "transaction.state.log.segment.bytes",
        INT,
        "104857600",
        "Segment size of __transaction_state (kept small so compaction can work).",
        AtLeast(1),
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        INT,
        "900000",
        "Longest transaction timeout a producer may ask for.",
        AtLeast(1),
    ),
    ConfigKey(
        "transaction.partition.verification.enable",
        BOOLEAN,
        "true",
        "Check a transactional write to a partition with its coordinator first (KIP-890).",
    ),
    ConfigKey(
        "transactional.id.expiration.ms",
        INT,
        "604800000",
        "A transactional id idle for this long (no transaction open) is removed.",
        AtLeast(1),
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        INT,
        "10000",
        "Time between checks for transactions open longer than their timeout.",
        AtLeast(1),
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        INT,
        "3600000",
        "Time between checks for expired transactional ids.",
        AtLeast(1),
    ),
)
