"""The partition log: segments, indexes, producer state, recovery and retention."""

from strom.log.config import LogConfig
from strom.log.partition_log import PartitionLog
from strom.log.producer_state import BatchMetadata, ProducerEntry
from strom.log.recovery import RecoveryReport, SegmentTruncation
from strom.log.results import AppendResult, FlushPlan, OffsetOutOfRange, ReadResult, SegmentInfo

__all__ = [
    "AppendResult",
    "BatchMetadata",
    "FlushPlan",
    "LogConfig",
    "OffsetOutOfRange",
    "PartitionLog",
    "ProducerEntry",
    "ReadResult",
    "RecoveryReport",
    "SegmentInfo",
    "SegmentTruncation",
]
