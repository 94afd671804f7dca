"""The partition log: segments, indexes, producer state, leader epochs, recovery and
retention."""

from strom.log.config import LogConfig
from strom.log.leader_epochs import LeaderEpochCache
from strom.log.offset_checkpoint import (
    CheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from strom.log.partition_log import PartitionLog
from strom.log.producer_state import BatchMetadata, ProducerEntry
from strom.log.recovery import RecoveryReport, SegmentTruncation
from strom.log.results import AppendResult, FlushPlan, OffsetOutOfRange, ReadResult, SegmentInfo

__all__ = [
    "AppendResult",
    "BatchMetadata",
    "CheckpointError",
    "FlushPlan",
    "LeaderEpochCache",
    "LogConfig",
    "OffsetOutOfRange",
    "PartitionLog",
    "ProducerEntry",
    "ReadResult",
    "RecoveryReport",
    "SegmentInfo",
    "SegmentTruncation",
    "read_offset_checkpoint",
    "write_offset_checkpoint",
]
