"""Per-partition log settings: Kafka's topic configs, snake_cased, with Kafka's defaults."""

from __future__ import annotations

from dataclasses import dataclass

from strom.protocol.records import TimestampType

__all__ = ["LogConfig"]

_NEVER_MS = 2**63 - 1
_MAX_SEGMENT_BYTES = 2**31 - 1  # positions are u32 in the index; Kafka caps it at int32 too


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    """segment.bytes: roll when the active segment would grow beyond this."""
    segment_ms: int = 604800000
    """segment.ms: roll when the active segment is older than this."""
    retention_ms: int = 604800000
    """retention.ms: delete segments whose newest record is older; -1 keeps forever."""
    retention_bytes: int = -1
    """retention.bytes: delete the oldest segments while the log is larger; -1 = no limit."""
    index_interval_bytes: int = 4096
    """index.interval.bytes: bytes of batches between two offset index entries."""
    max_message_bytes: int = 1048588
    """max.message.bytes: the largest batch accepted."""
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    """message.timestamp.type: keep the producer's timestamps or stamp the append time."""
    flush_messages: int = 1
    """flush.messages: fsync after this many records (1 = before every acknowledgement)."""
    flush_ms: int = _NEVER_MS
    """flush.ms: fsync when the oldest unflushed append is older than this."""
    cleanup_policy: str = "delete"
    """cleanup.policy: "delete", "compact" or "compact,delete" (comma-separated)."""
    delete_retention_ms: int = 86400000
    """delete.retention.ms: how long a tombstone outlives the cleaning that first kept it."""
    min_cleanable_dirty_ratio: float = 0.5
    """min.cleanable.dirty.ratio: clean once dirty bytes / cleanable bytes reach this."""
    min_compaction_lag_ms: int = 0
    """min.compaction.lag.ms: a sealed segment newer than this is not cleaned yet."""
    max_compaction_lag_ms: int = _NEVER_MS
    """max.compaction.lag.ms: clean regardless of the ratio once dirty data is this old."""

    def __post_init__(self) -> None:
        if not 14 <= self.segment_bytes <= _MAX_SEGMENT_BYTES:
            raise ValueError(
                f"segment_bytes must be within 14..{_MAX_SEGMENT_BYTES}, got {self.segment_bytes}"
            )
        if self.segment_ms < 1:
            raise ValueError(f"segment_ms must be positive, got {self.segment_ms}")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must not be negative")
        if self.flush_messages < 1 or self.flush_ms < 0:
            raise ValueError("flush_messages must be >= 1 and flush_ms >= 0")
        unknown = set(self.policies) - {"compact", "delete"}
        if unknown or not self.policies:
            raise ValueError(f"cleanup_policy must name compact and/or delete, got {unknown}")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise ValueError("min_cleanable_dirty_ratio must be within 0..1")
        if self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0:
            raise ValueError("delete_retention_ms and min_compaction_lag_ms must be >= 0")
        if self.max_compaction_lag_ms < 1:
            raise ValueError("max_compaction_lag_ms must be positive")

    @property
    def policies(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @property
    def compact(self) -> bool:
        """True when the cleaner keeps only the latest record of each key."""
        return "compact" in self.policies

    @property
    def delete(self) -> bool:
        """True when retention.ms / retention.bytes delete old segments."""
        return "delete" in self.policies
