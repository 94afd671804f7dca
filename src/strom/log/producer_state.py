"""Idempotent producer state of one partition: epochs, sequences, the last five batches.

Kafka's rules, checked for every batch of an append before anything is written:

* a batch equal (epoch, first and last sequence) to one of the producer's last five
  batches is a duplicate: nothing is written and the original offsets are returned;
* an epoch below the producer's current epoch is fenced (INVALID_PRODUCER_EPOCH);
* a new, higher epoch must start at sequence 0, the same epoch must continue at last
  sequence + 1 (wrapping to 0 after 2**31 - 1), else OUT_OF_ORDER_SEQUENCE_NUMBER;
* a producer id never seen must start at sequence 0, else UNKNOWN_PRODUCER_ID;
* a batch without sequence (a coordinator's, as TxnOffsetCommit writes) is checked for
  its epoch only;
* a producer with a transaction open on the partition may write only transactional
  batches until its marker, else INVALID_TXN_STATE.

Transactions (Kafka's ``currentTxnFirstOffset``): a producer's first transactional batch
opens its transaction at its base offset; its COMMIT or ABORT marker (``end_txn``) ends
it and moves the producer to the marker's epoch and coordinator epoch. A marker whose
epoch is older than the producer's is refused with INVALID_PRODUCER_EPOCH, one whose
coordinator epoch is older with TRANSACTION_COORDINATOR_FENCED (``check_marker``).

Snapshots (``<20-digit offset>.snapshot``) hold the state as of that offset:
``b"SPS3"``, offset i64, producer count u32, then per producer: id i64, epoch i16,
coordinator epoch i32, last timestamp i64, first offset of its open transaction i64
(-1: none), offset of its last marker while that is its last batch i64 (-1: none),
batch count u8 and per batch first/last sequence i32, first/last offset i64, timestamp
i64; a CRC32C (u32) of everything before it closes the file. Older versions are still
read: version 2 (``b"SPS2"``) lacks the last marker's offset (-1: compaction may then
remove that marker once its transaction is empty), version 1 (``b"SPS1"``, written
before transactions) also the two transaction fields (no transaction open, coordinator
epoch -1).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import crc32c
from kio.schema.errors import ErrorCode

from strom.protocol.records import BatchHeader, RecordsError

__all__ = [
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateManager",
    "SnapshotError",
]

CACHED_BATCHES = 5
_SEQUENCE_MODULUS = 2**31

_MAGIC = b"SPS3"
_MAGIC_V2 = b"SPS2"
_MAGIC_V1 = b"SPS1"
_FILE_HEADER = struct.Struct(">4sqI")
_PRODUCER = struct.Struct(">qhiqqqB")
_PRODUCER_V2 = struct.Struct(">qhiqqB")
_PRODUCER_V1 = struct.Struct(">qhqB")
_BATCH = struct.Struct(">iiqqq")
_CRC = struct.Struct(">I")


class SnapshotError(ValueError):
    """A snapshot file that cannot be trusted."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    """One producer id's state."""

    # Transitions: created by its first batch or marker -> (same-epoch batch | new epoch
    #   | transactional batch opening a transaction | marker ending it)*.
    # A new epoch clears the cached batches.
    producer_id: int
    epoch: int
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None
    """First offset of its transaction open on the partition (None: no transaction)."""
    last_marker_offset: int = -1
    """Offset of its last marker while that is its last batch in the log (-1: not).
    Compaction keeps that marker: it holds the producer's epochs for a replay."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None


class ProducerStateManager:
    """All producers of one partition."""

    # Transitions: empty -> (check + update | replay | load | clear)*.
    __slots__ = ("_producers",)

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def entries(self) -> list[ProducerEntry]:
        """Every producer of the partition (DescribeProducers), to read, not change."""
        return list(self._producers.values())

    def clear(self) -> None:
        self._producers.clear()

    def check(self, headers: Iterable[BatchHeader]) -> BatchMetadata | None:
        """Check a whole append; returns the original batch if it is a duplicate.

        Raises RecordsError with the Kafka error code when a batch is refused. Batches of
        the same producer within one append are checked against each other too.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence)
        appended = list(headers)
        for header in appended:
            producer_id = header.producer_id
            if producer_id < 0 or header.is_control:
                continue
            if header.base_sequence < 0:
                self._check_epoch(header, pending)
                continue
            epoch = header.producer_epoch
            first_seq = header.base_sequence
            if producer_id in pending:
                current_epoch, last_seq = pending[producer_id]
            else:
                entry = self._producers.get(producer_id)
                if entry is None:
                    if first_seq != 0:
                        raise RecordsError(
                            ErrorCode.unknown_producer_id,
                            f"producer {producer_id} is unknown and starts at sequence "
                            f"{first_seq}, not 0",
                        )
                    pending[producer_id] = (epoch, header.last_sequence)
                    continue
                duplicate = entry.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
                current_epoch, last_seq = entry.epoch, entry.last_seq
            if epoch < current_epoch:
                raise RecordsError(
                    ErrorCode.invalid_producer_epoch,
                    f"producer {producer_id} epoch {epoch} is older than {current_epoch}",
                )
            if epoch > current_epoch:
                if first_seq != 0:
                    raise RecordsError(
                        ErrorCode.out_of_order_sequence_number,
                        f"producer {producer_id} new epoch {epoch} starts at sequence "
                        f"{first_seq}, not 0",
                    )
            elif first_seq != (last_seq + 1) % _SEQUENCE_MODULUS:
                raise RecordsError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {producer_id} epoch {epoch}: expected sequence "
                    f"{(last_seq + 1) % _SEQUENCE_MODULUS}, got {first_seq}",
                )
            pending[producer_id] = (epoch, header.last_sequence)
        self._check_txn_states(appended)
        return None

    def _check_txn_states(self, headers: Sequence[BatchHeader]) -> None:
        """INVALID_TXN_STATE for a plain batch of a producer with a transaction open."""
        in_txn: set[int] = set()
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0 or header.is_control:
                continue
            if header.is_transactional:
                in_txn.add(producer_id)
                continue
            entry = self._producers.get(producer_id)
            if producer_id in in_txn or (
                entry is not None and entry.current_txn_first_offset is not None
            ):
                raise RecordsError(
                    ErrorCode.invalid_txn_state,
                    f"producer {producer_id} has a transaction open: expected a "
                    "transactional batch",
                )

    def _check_epoch(self, header: BatchHeader, pending: dict[int, tuple[int, int]]) -> None:
        producer_id = header.producer_id
        if producer_id in pending:
            current = pending[producer_id][0]
        else:
            entry = self._producers.get(producer_id)
            current = -1 if entry is None else entry.epoch
        if header.producer_epoch < current:
            raise RecordsError(
                ErrorCode.invalid_producer_epoch,
                f"producer {producer_id} epoch {header.producer_epoch} is older than {current}",
            )

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a COMMIT or ABORT marker of an older producer epoch
        (INVALID_PRODUCER_EPOCH) or from an older coordinator (TRANSACTION_COORDINATOR_FENCED),
        as Kafka's ProducerAppendInfo does for markers of transaction versions 0 and 1."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise RecordsError(
                ErrorCode.invalid_producer_epoch,
                f"marker of producer {producer_id} has epoch {producer_epoch}, older than "
                f"{entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise RecordsError(
                ErrorCode.transaction_coordinator_fenced,
                f"marker of producer {producer_id} has coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )

    def repeats(self, headers: Iterable[BatchHeader]) -> bool:
        """Whether this append is a retry of a batch already appended (`check` would
        answer it with the original's offsets). Changes nothing."""
        try:
            return self.check(headers) is not None
        except RecordsError:
            return False

    def continues(self, headers: Iterable[BatchHeader]) -> bool:
        """Whether this append would be written as new batches, each continuing its
        producer's sequence (`check` would neither refuse it nor find a duplicate)."""
        try:
            return self.check(headers) is None
        except RecordsError:
            return False

    def update(self, header: BatchHeader, first_offset: int, timestamp: int) -> None:
        """Record an appended batch (after ``check``, or unchecked when replaying)."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, header.producer_epoch)
            self._producers[producer_id] = entry
        elif header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = timestamp
        entry.last_marker_offset = -1
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(
                    header.base_sequence,
                    header.last_sequence,
                    first_offset,
                    first_offset + header.last_offset_delta,
                    timestamp,
                )
            )

    def end_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        timestamp: int,
        offset: int = -1,
    ) -> int | None:
        """Record a COMMIT or ABORT marker at ``offset`` (after ``check_marker``, or
        unchecked when copying or replaying). Returns the first offset of the transaction
        it ended, or None when the producer had none open here."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id, producer_epoch)
            self._producers[producer_id] = entry
        elif producer_epoch != entry.epoch:
            entry.epoch = producer_epoch
            entry.batches.clear()
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        entry.last_marker_offset = offset
        first, entry.current_txn_first_offset = entry.current_txn_first_offset, None
        return first

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return {
            entry.producer_id: entry.current_txn_first_offset
            for entry in self._producers.values()
            if entry.current_txn_first_offset is not None
        }

    def last_batch_offsets(self) -> frozenset[int]:
        """Last offset of each producer's newest data batch, and of its last marker when
        that is its last batch: what compaction must keep so that a replay of the log
        rebuilds every producer."""
        offsets = {
            entry.batches[-1].last_offset for entry in self._producers.values() if entry.batches
        }
        offsets.update(
            entry.last_marker_offset
            for entry in self._producers.values()
            if entry.last_marker_offset >= 0
        )
        return frozenset(offsets)

    def replay(self, header: BatchHeader) -> None:
        """Rebuild from a stored batch header (its own offsets and timestamp)."""
        self.update(header, header.base_offset, header.max_timestamp)

    # ------------------------------------------------------------------ snapshots

    def to_snapshot(self, offset: int) -> bytes:
        out = bytearray(_FILE_HEADER.pack(_MAGIC, offset, len(self._producers)))
        for entry in self._producers.values():
            txn_first = entry.current_txn_first_offset
            out += _PRODUCER.pack(
                entry.producer_id,
                entry.epoch,
                entry.coordinator_epoch,
                entry.last_timestamp,
                -1 if txn_first is None else txn_first,
                entry.last_marker_offset,
                len(entry.batches),
            )
            for b in entry.batches:
                out += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
                )
        out += _CRC.pack(crc32c.crc32c(out))
        return bytes(out)

    def load_snapshot(self, data: bytes) -> int:
        """Replace the state with a snapshot's; returns its offset. Raises SnapshotError."""
        producers, offset = _parse_snapshot(data)
        self._producers = {entry.producer_id: entry for entry in producers}
        return offset


def _parse_snapshot(data: bytes) -> tuple[Sequence[ProducerEntry], int]:
    if len(data) < _FILE_HEADER.size + _CRC.size:
        raise SnapshotError("snapshot too short")
    body = memoryview(data)[: -_CRC.size]
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(body) != crc:
        raise SnapshotError("snapshot CRC mismatch")
    magic, offset, count = _FILE_HEADER.unpack_from(body, 0)
    if magic not in (_MAGIC, _MAGIC_V2, _MAGIC_V1):
        raise SnapshotError(f"unknown snapshot format {magic!r}")
    pos = _FILE_HEADER.size
    entries: list[ProducerEntry] = []
    try:
        for _ in range(count):
            last_marker = -1
            if magic == _MAGIC:
                producer_id, epoch, coordinator_epoch, last_timestamp, txn_first, last_marker, n = (
                    _PRODUCER.unpack_from(body, pos)
                )
                pos += _PRODUCER.size
            elif magic == _MAGIC_V2:
                producer_id, epoch, coordinator_epoch, last_timestamp, txn_first, n = (
                    _PRODUCER_V2.unpack_from(body, pos)
                )
                pos += _PRODUCER_V2.size
            else:
                producer_id, epoch, last_timestamp, n = _PRODUCER_V1.unpack_from(body, pos)
                pos += _PRODUCER_V1.size
                coordinator_epoch, txn_first = -1, -1
            entry = ProducerEntry(
                producer_id,
                epoch,
                last_timestamp,
                coordinator_epoch=coordinator_epoch,
                current_txn_first_offset=None if txn_first < 0 else txn_first,
                last_marker_offset=last_marker,
            )
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            entries.append(entry)
    except struct.error as exc:
        raise SnapshotError("snapshot ends early") from exc
    if pos != len(body):
        raise SnapshotError("trailing bytes in snapshot")
    return entries, offset
