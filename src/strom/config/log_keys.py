"""The broker keys of the partition logs: where they live, how segments roll, retention,
flushing, timestamps, compression and the log cleaner (compaction).

Kafka's names and (unless noted) Kafka's defaults; `keys` assembles every key. Most of
them are the broker defaults behind a topic config (see `topic`).
"""

from __future__ import annotations

from strom.config.schema import LONG_MAX, AtLeast, Between, ConfigKey, ConfigType, NonEmpty, OneOf

__all__ = ["CLEANUP_POLICIES", "COMPRESSION_TYPES", "LOG_KEYS", "TIMESTAMP_TYPES"]

INT = ConfigType.INT
LONG = ConfigType.LONG
BOOLEAN = ConfigType.BOOLEAN
STRING = ConfigType.STRING
LIST = ConfigType.LIST
DOUBLE = ConfigType.DOUBLE

_MAX = str(LONG_MAX)
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")

LOG_KEYS: tuple[ConfigKey, ...] = (
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
        "Time a tombstone or an emptied transaction's marker is kept once a pass found it.",
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
)
