"""The values a share-partition takes and gives: record states, fetched records,
acquired ranges, acknowledgements, and the effects of its decisions."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.share.records import ShareSnapshotValue, ShareUpdateValue

__all__ = [
    "DLQ_HEADER_DELIVERY_COUNT",
    "DLQ_HEADER_GROUP",
    "DLQ_HEADER_MESSAGE",
    "DLQ_HEADER_OFFSET",
    "DLQ_HEADER_PARTITION",
    "DLQ_HEADER_TOPIC",
    "AckBatch",
    "AcknowledgeType",
    "AcquiredRecords",
    "DeadLetter",
    "DeadLetterReason",
    "FetchedRecord",
    "RecordState",
    "ShareDecision",
    "SharePartitionId",
]

# The headers KIP-1191 puts on a record copied to a dead-letter topic.
DLQ_HEADER_TOPIC = "__dlq.errors.topic"
DLQ_HEADER_PARTITION = "__dlq.errors.partition"
DLQ_HEADER_OFFSET = "__dlq.errors.offset"
DLQ_HEADER_GROUP = "__dlq.errors.group"
DLQ_HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
DLQ_HEADER_MESSAGE = "__dlq.errors.message"


class RecordState(enum.IntEnum):
    """Kafka's delivery states, with Kafka's ids (ACQUIRED is never written). ARCHIVING
    (KIP-1191) is archived with its copy to the dead-letter topic still owed: not
    acquirable, and not final (it holds the start offset back) until ARCHIVED."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    """ShareAcknowledge's types; GAP marks an offset with no record to deliver."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class DeadLetterReason(enum.Enum):
    CLIENT_REJECT = "Offset rejected by client."
    DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."

    @classmethod
    def inferred(cls, delivery_count: int, delivery_count_limit: int) -> DeadLetterReason:
        """The reason of a record read back ARCHIVING (the reason is not written): the
        limit if its count reached it, else a REJECT, as Kafka infers it."""
        if delivery_count >= delivery_count_limit:
            return cls.DELIVERY_COUNT_EXCEEDED
        return cls.CLIENT_REJECT


@dataclass(frozen=True, slots=True)
class SharePartitionId:
    group_id: str
    topic_id: uuid.UUID
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class FetchedRecord:
    """A record the shell read from the partition's log: its offset and timestamp."""

    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """ShareFetch's AcquiredRecords: a range acquired at one delivery count."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    """ShareAcknowledge's AcknowledgementBatch: one type for the whole range, or one
    per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Records the shell copies to the group's dead-letter topic, with KIP-1191's
    headers (the `DLQ_HEADER_*` names) filled from these fields. They are ARCHIVING
    until the shell reports the copy (`SharePartitionState.dead_letters_copied`)."""

    dead_letter_topic: str
    group_id: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    delivery_count: int
    reason: DeadLetterReason


@dataclass(frozen=True, slots=True)
class ShareDecision:
    """What a decision asks the shell to do: write `records` to the share-partition's
    `__share_group_state` partition (in order), then copy `dead_letters` and report
    each copy made (or given up) with `SharePartitionState.dead_letters_copied`."""

    error: ErrorCode = ErrorCode.none
    records: tuple[ShareSnapshotValue | ShareUpdateValue, ...] = ()
    dead_letters: tuple[DeadLetter, ...] = ()
    acquired: tuple[AcquiredRecords, ...] = ()
