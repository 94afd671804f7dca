"""The broker config keys strom knows, with Kafka's names and (unless noted) Kafka's defaults.

Keys with `effect=False` are Kafka keys accepted so that Kafka's shipped `server.properties`
files start strom unchanged; they change nothing (the broker logs them at start).
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from strom.config.compat_keys import KAFKA_ONLY_KEYS
from strom.config.schema import (
    LONG_MAX,
    AtLeast,
    Between,
    ConfigKey,
    ConfigType,
    DynamicUpdateMode,
    NonEmpty,
    OneOf,
    unknown_key,
)

INT = ConfigType.INT
LONG = ConfigType.LONG
BOOLEAN = ConfigType.BOOLEAN
STRING = ConfigType.STRING
LIST = ConfigType.LIST
DOUBLE = ConfigType.DOUBLE

_MAX = str(LONG_MAX)
_REPLICATION_FACTOR = Between(1, 32767)
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = (
    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
    "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)


CONFIG_KEYS: tuple[ConfigKey, ...] = (
    # --- node and roles
    ConfigKey(
        "node.id",
        INT,
        "1",
        "This node's id; -1 means 1 on a single node (Kafka: required).",
        AtLeast(-1),
    ),
    ConfigKey(
        "broker.id",
        INT,
        None,
        "Kafka's older name for node.id; must agree if both are set.",
        AtLeast(-1),
    ),
    ConfigKey(
        "process.roles",
        LIST,
        "broker,controller",
        "Roles of this node: broker, controller or both (Kafka: no default).",
        OneOf(("broker", "controller")),
    ),
    ConfigKey(
        "cluster.name", STRING, "strom", "strom: a human-readable name for the cluster.", NonEmpty()
    ),
    ConfigKey(
        "broker.rack", STRING, None, "Rack of this broker, for rack-aware replica placement."
    ),
    # --- listeners
    ConfigKey(
        "listeners",
        LIST,
        "PLAINTEXT://127.0.0.1:9092",
        "Listeners as NAME://HOST:PORT; empty host = all interfaces (Kafka: PLAINTEXT://:9092).",
    ),
    ConfigKey(
        "advertised.listeners",
        LIST,
        None,
        "Addresses given to clients, NAME://HOST:PORT; default: from listeners.",
    ),
    ConfigKey(
        "controller.listener.names",
        LIST,
        "CONTROLLER",
        "Names of the listeners used by the controller quorum (Kafka: no default).",
    ),
    ConfigKey(
        "listener.security.protocol.map",
        LIST,
        DEFAULT_PROTOCOL_MAP,
        "NAME:PROTOCOL per listener; strom speaks PLAINTEXT only.",
    ),
    ConfigKey(
        "inter.broker.listener.name",
        STRING,
        None,
        "Listener brokers use to reach each other; default: PLAINTEXT or the first.",
    ),
    ConfigKey(
        "security.inter.broker.protocol",
        STRING,
        "PLAINTEXT",
        "Protocol between brokers; strom speaks PLAINTEXT only.",
        OneOf(SECURITY_PROTOCOLS),
    ),
    # --- controller quorum
    ConfigKey(
        "controller.quorum.voters", LIST, "", "Static controller quorum as ID@HOST:PORT entries."
    ),
    ConfigKey(
        "controller.quorum.bootstrap.servers",
        LIST,
        "",
        "HOST:PORT of controllers to discover the quorum from.",
    ),
    ConfigKey(
        "controller.quorum.election.timeout.ms",
        INT,
        "1000",
        "Time without a leader before a voter starts an election.",
        AtLeast(1),
    ),
    ConfigKey(
        "controller.quorum.election.backoff.max.ms",
        INT,
        "1000",
        "Most time a voter waits before retrying a failed election.",
        AtLeast(1),
    ),
    ConfigKey(
        "controller.quorum.fetch.timeout.ms",
        INT,
        "2000",
        "A Raft leader that hears from no majority for 1.5 times this steps down.",
        AtLeast(1),
    ),
    ConfigKey(
        "broker.heartbeat.interval.ms",
        INT,
        "2000",
        "Time between a broker's heartbeats to the controller.",
        AtLeast(1),
    ),
    ConfigKey(
        "broker.session.timeout.ms",
        INT,
        "9000",
        "A broker without heartbeats for this long is fenced.",
        AtLeast(1),
    ),
    ConfigKey(
        "zookeeper.connect",
        STRING,
        None,
        "host:port[,host:port...][/chroot]: keep the metadata in ZooKeeper, not Raft.",
    ),
    ConfigKey(
        "zookeeper.session.timeout.ms",
        INT,
        "18000",
        "A broker (or controller) whose ZooKeeper session ends is gone.",
        AtLeast(1),
    ),
    ConfigKey(
        "zookeeper.connection.timeout.ms",
        INT,
        None,
        "Wait for the first ZooKeeper connection (default: the session timeout).",
        AtLeast(1),
    ),
    ConfigKey(
        "initial.broker.registration.timeout.ms",
        INT,
        "60000",
        "Time a starting broker waits to register with the controller.",
        AtLeast(1),
    ),
    # --- storage
    ConfigKey(
        "log.dirs", LIST, None, "Directory for the data; wins over log.dir (strom: one only)."
    ),
    ConfigKey(
        "log.dir",
        STRING,
        "./data",
        "Directory for the data when log.dirs is unset (Kafka: /tmp/kafka-logs).",
        NonEmpty(),
    ),
    ConfigKey(
        "metadata.log.dir",
        STRING,
        None,
        "Directory for the metadata log; default: the data directory.",
    ),
    ConfigKey(
        "log.segment.bytes",
        INT,
        "1073741824",
        "Size at which a log segment is rolled.",
        AtLeast(14),
    ),
    ConfigKey(
        "log.roll.ms",
        LONG,
        None,
        "Age at which a segment is rolled; wins over log.roll.hours.",
        AtLeast(1),
    ),
    ConfigKey(
        "log.roll.hours", INT, "168", "Age at which a segment is rolled, in hours.", AtLeast(1)
    ),
    ConfigKey(
        "log.retention.ms",
        LONG,
        None,
        "Time a segment is kept; -1 = forever. Wins over minutes and hours.",
        AtLeast(-1),
    ),
    ConfigKey(
        "log.retention.minutes",
        INT,
        None,
        "Time a segment is kept, in minutes; wins over hours.",
        AtLeast(-1),
    ),
    ConfigKey("log.retention.hours", INT, "168", "Time a segment is kept, in hours.", AtLeast(-1)),
    ConfigKey("log.retention.bytes", LONG, "-1", "Most bytes kept per partition; -1 = no limit."),
    ConfigKey(
        "log.retention.check.interval.ms",
        LONG,
        "300000",
        "Time between checks for segments to delete.",
        AtLeast(1),
    ),
    ConfigKey(
        "log.index.interval.bytes",
        INT,
        "4096",
        "Bytes between two entries of the offset index.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.index.size.max.bytes", INT, "10485760", "Largest size of an offset index.", AtLeast(4)
    ),
    ConfigKey(
        "log.flush.interval.messages",
        LONG,
        "1",
        "Records between fsyncs; 1 = fsync before acknowledging (Kafka: Long.MAX, the OS).",
        AtLeast(1),
    ),
    ConfigKey(
        "log.flush.interval.ms",
        LONG,
        None,
        "Most time records stay unsynced; default: log.flush.scheduler.interval.ms.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.flush.scheduler.interval.ms",
        LONG,
        _MAX,
        "Time between checks for logs to flush.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.segment.delete.delay.ms",
        LONG,
        "60000",
        "Time before a deleted segment's files are removed.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.cleanup.policy",
        LIST,
        "delete",
        "Default cleanup policy: delete, compact.",
        OneOf(CLEANUP_POLICIES),
    ),
    # --- log cleaner (compaction)
    ConfigKey(
        "log.cleaner.enable",
        BOOLEAN,
        "true",
        "Run the log cleaner, which compacts topics whose cleanup.policy has compact.",
    ),
    ConfigKey(
        "log.cleaner.threads",
        INT,
        "1",
        "Partitions cleaned at the same time, each in a worker thread; 0 counts as 1.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.cleaner.backoff.ms",
        LONG,
        "15000",
        "Time between two looks of the cleaner for logs to clean.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.cleaner.dedupe.buffer.size",
        LONG,
        "134217728",
        "Memory for the key maps of cleaning passes, shared by the cleaner threads.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        LONG,
        "86400000",
        "Time a tombstone is kept after the cleaning pass that first kept it.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio",
        DOUBLE,
        "0.5",
        "Share of dirty bytes in the cleanable log that starts a cleaning pass.",
        Between(0, 1),
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        LONG,
        "0",
        "Least age of a segment's newest record before it is cleaned.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.cleaner.max.compaction.lag.ms",
        LONG,
        _MAX,
        "Age of the oldest dirty record at which a log is cleaned whatever its dirty ratio.",
        AtLeast(1),
    ),
    ConfigKey(
        "log.message.timestamp.type",
        STRING,
        "CreateTime",
        "Record timestamps: as the producer set them, or the append time.",
        OneOf(TIMESTAMP_TYPES),
    ),
    ConfigKey(
        "log.message.timestamp.before.max.ms",
        LONG,
        _MAX,
        "Most a CreateTime timestamp may lie before the broker's time.",
        AtLeast(0),
    ),
    ConfigKey(
        "log.message.timestamp.after.max.ms",
        LONG,
        _MAX,
        "Most a CreateTime timestamp may lie after the broker's time.",
        AtLeast(0),
    ),
    ConfigKey(
        "message.max.bytes", INT, "1048588", "Largest record batch the broker accepts.", AtLeast(0)
    ),
    ConfigKey(
        "compression.type",
        STRING,
        "producer",
        "Compression of stored batches; producer = keep the producer's.",
        OneOf(COMPRESSION_TYPES),
    ),
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
    # --- requests and connections
    ConfigKey(
        "socket.request.max.bytes",
        INT,
        "104857600",
        "Largest request the broker reads.",
        AtLeast(1),
    ),
    ConfigKey(
        "connections.max.idle.ms",
        LONG,
        "600000",
        "Idle connections are closed after this long.",
        AtLeast(1),
    ),
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
    *KAFKA_ONLY_KEYS,  # accepted for compatibility, no effect (compat_keys.py)
)

# Keys that are parsed and validated today but that only a later capability acts on
# (the cluster, replication, consumer groups, broker-side recompression). The broker
# lists them at start like the compatibility keys, so nobody mistakes them for working.
NOT_YET_IN_EFFECT = frozenset(
    {
        "controller.quorum.election.backoff.max.ms",
        "log.index.size.max.bytes",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "compression.type",
    }
)

# Keys AlterConfigs may change at run time, for the whole cluster (the dynamic default) or
# for one broker: those Kafka's docs list with "Dynamic Update Mode: cluster-wide" (the
# broker keys behind topic configs, the log cleaner's and the thread pools'). The
# hours/minutes forms (log.retention.hours, log.roll.hours, ...) are read-only in Kafka:
# their millisecond forms are the dynamic ones. Kafka's per-broker keys (listeners and
# their security settings) stay read-only here: strom cannot rebind a listener live.
CLUSTER_WIDE_KEYS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.retention.ms",
        "log.retention.bytes",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.segment.delete.delay.ms",
        "log.cleanup.policy",
        "log.cleaner.threads",
        "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "log.message.timestamp.type",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.after.max.ms",
        "log.preallocate",
        "message.max.bytes",
        "compression.type",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "num.network.threads",
        "num.io.threads",
        "num.recovery.threads.per.data.dir",
        "num.replica.fetchers",
        "background.threads",
        "max.connections",
        "max.connections.per.ip",
    }
)
PER_BROKER_KEYS: frozenset[str] = frozenset()
"""Keys that may change per broker but not as a cluster default (none in strom yet)."""


def _finish(key: ConfigKey) -> ConfigKey:
    if key.name in NOT_YET_IN_EFFECT:
        key = replace(key, effect=False)
    if key.name in CLUSTER_WIDE_KEYS:
        key = replace(key, dynamic=DynamicUpdateMode.CLUSTER_WIDE)
    elif key.name in PER_BROKER_KEYS:
        key = replace(key, dynamic=DynamicUpdateMode.PER_BROKER)
    return key


CONFIG_KEYS = tuple(_finish(key) for key in CONFIG_KEYS)

CONFIG_KEYS_BY_NAME = MappingProxyType({key.name: key for key in CONFIG_KEYS})


def config_key(name: str) -> ConfigKey:
    """The broker key `name`; ConfigError with a did-you-mean hint if there is none."""
    try:
        return CONFIG_KEYS_BY_NAME[name]
    except KeyError:
        raise unknown_key(name, tuple(CONFIG_KEYS_BY_NAME)) from None
