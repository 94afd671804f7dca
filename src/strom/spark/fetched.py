"""A read task's records, from the record batches Fetch answers hold to Arrow batches. Pure.

The batch reader (fetch_reader.py) fetches a range's partition with strom's own client
and hands each answer's records here. Each complete batch is checked (CRC), skipped when
the range is already past it, when it is a transaction marker, or when read_committed
and its transaction was aborted; otherwise all its records are decoded into column
buffers at once (`strom.protocol.columns`, compiled where the install could build it),
so no Python object is made per record. `build()` turns the buffers into one Arrow batch
of Spark's Kafka schema, cut to the range: a range may start or end inside a batch.

Aborted transactions follow Kafka's consumer: an answer lists (producer id, first
offset) of the transactions aborted in what it returns; a producer's transactional
batches are skipped from its first offset until its abort marker.

RangeColumns: position = range start -> (take)* -> position >= range end; build() any time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

from strom.protocol.batch_header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CRC_START,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    Buffer,
    RecordsError,
    decompress_records,
    iter_batches,
)
from strom.protocol.columns import ColumnBuffers, decode_columns
from strom.protocol.markers import MarkerError, marker_of
from strom.protocol.record_codec import decode_batch
from strom.spark.arrow import HEADER_TYPE, arrow_read_schema
from strom.spark.errors import BrokerError
from strom.spark.offsets import OffsetRange

MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
_INT64 = struct.Struct("<q")
_CREATE_TIME = (0).to_bytes(4, "little")
_LOG_APPEND_TIME = (1).to_bytes(4, "little")

AbortedTxn = tuple[int, int]  # (producer id, first offset), as a Fetch answer lists them


class AbortedFilter:
    """Which transactional batches of one Fetch answer belong to aborted transactions."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._waiting = sorted(aborted, key=lambda txn: txn[1], reverse=True)
        self._aborting: set[int] = set()

    def skips(self, header: BatchHeader) -> bool:
        """True for a data batch of an aborted transaction."""
        self._reach(header)
        return header.is_transactional and header.producer_id in self._aborting

    def marker(self, header: BatchHeader, abort: bool) -> None:
        """A control batch: an abort marker ends its producer's aborted transaction."""
        self._reach(header)
        if abort:
            self._aborting.discard(header.producer_id)

    def _reach(self, header: BatchHeader) -> None:
        while self._waiting and self._waiting[-1][1] <= header.last_offset:
            self._aborting.add(self._waiting.pop()[0])


class RangeColumns:
    """One range's records taken from Fetch answers, as Arrow column buffers."""

    def __init__(self, rng: OffsetRange, *, include_headers: bool, read_committed: bool) -> None:
        self.range = rng
        self.position = rng.start
        self.include_headers = include_headers
        self.read_committed = read_committed
        self.schema = arrow_read_schema(include_headers)
        self._buffers = ColumnBuffers()
        self._types = bytearray()
        self._dropped: list[tuple[int, int]] = []  # rows [from, to) before the position

    @property
    def done(self) -> bool:
        return self.position >= self.range.until

    @property
    def rows(self) -> int:
        return self._buffers.rows

    def skip_to(self, offset: int) -> None:
        """Go on from `offset` (the log no longer holds what came before it, even where
        a batch still does)."""
        self.position = max(self.position, offset)

    def end_at(self, until: int) -> None:
        """Stop at `until` (the log ends there, before the range did)."""
        self.range = OffsetRange(self.range.topic_partition, self.range.start, until)

    def take(self, records: Buffer, aborted: Iterable[AbortedTxn] = ()) -> bool:
        """Take the complete batches of one answer; False if it held none (the answer
        was empty, or its first batch did not fit the byte limit)."""
        view = memoryview(records)
        taken = False
        filter_ = AbortedFilter(aborted) if self.read_committed else None
        for pos, header in iter_batches(view):
            taken = True
            if self.done:
                break
            if header.next_offset <= self.position:
                continue
            batch = view[pos : pos + header.size_bytes]
            if crc32c.crc32c(batch[CRC_START:]) != header.crc:
                raise BrokerError(
                    f"strom: {self.range.topic_partition}: the batch at offset "
                    f"{header.base_offset} is corrupt (CRC mismatch)"
                )
            if header.is_control:  # never a record of its own
                if filter_ is not None:
                    filter_.marker(header, _is_abort(batch))
            elif filter_ is None or not filter_.skips(header):
                self._decode(batch, header)
            self.position = header.next_offset
        return taken

    def _decode(self, batch: memoryview, header: BatchHeader) -> None:
        codec = header.attributes & COMPRESSION_MASK
        log_append = bool(header.attributes & TIMESTAMP_TYPE_BIT)
        rows_before = self._buffers.rows
        data: Buffer = batch
        start = BATCH_HEADER_SIZE
        if codec:
            try:
                data = decompress_records(
                    codec, batch[BATCH_HEADER_SIZE:], MAX_DECOMPRESSED_BYTES, ""
                )
            except RecordsError as exc:
                raise BrokerError(
                    f"strom: {self.range.topic_partition}: the batch at offset "
                    f"{header.base_offset} cannot be decompressed: {exc}"
                ) from None
            start = 0
        try:
            decode_columns(
                data,
                start,
                len(data),
                header.records_count,
                header.base_offset,
                header.base_timestamp,
                header.max_timestamp,
                log_append,
                self.include_headers,
                self._buffers.out,
            )
        except ValueError as exc:
            raise BrokerError(
                f"strom: {self.range.topic_partition}: the batch at offset "
                f"{header.base_offset} is malformed: {exc}"
            ) from None
        self._types += (_LOG_APPEND_TIME if log_append else _CREATE_TIME) * header.records_count
        rows_after = self._buffers.rows
        if rows_after > rows_before:  # build() checks that offsets rise in between
            first = _INT64.unpack_from(self._buffers.offsets, 8 * rows_before)[0]
            last = _INT64.unpack_from(self._buffers.offsets, 8 * (rows_after - 1))[0]
            if first < header.base_offset or last > header.last_offset:
                raise BrokerError(
                    f"strom: {self.range.topic_partition}: the batch at offset "
                    f"{header.base_offset} is malformed: its records' offsets {first}..{last} "
                    f"are outside the batch's {header.base_offset}..{header.last_offset}"
                )
        if header.base_offset < self.position:  # the batch holding the position: cut it there
            first, rows = rows_before, self._buffers.rows
            before = _rows_below(self._buffers.offsets, first, rows, self.position)
            if before > first:
                self._dropped.append((first, before))

    def build(self) -> pa.RecordBatch:
        """The records taken so far, within the range, as one Arrow batch; the buffers
        start empty again."""
        buffers, types = self._buffers, self._types
        self._buffers, self._types = ColumnBuffers(), bytearray()
        rows = buffers.rows
        offsets = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(buffers.offsets)])
        stamps_ms = pa.Array.from_buffers(
            pa.int64(), rows, [None, pa.py_buffer(buffers.timestamps)]
        )
        tp = self.range.topic_partition
        if (
            rows > 1
            and pc.min(pc.subtract(offsets.slice(1), offsets.slice(0, rows - 1))).as_py() < 1
        ):
            raise BrokerError(
                f"strom: {tp}: the records fetched are not in offset order (a batch's "
                "offset deltas disagree with its neighbours')"
            )
        columns = [
            _binary(rows, buffers.key_validity, buffers.key_offsets, buffers.key_data),
            _binary(rows, buffers.value_validity, buffers.value_offsets, buffers.value_data),
            pa.repeat(pa.scalar(tp.topic, pa.string()), rows),
            pa.repeat(pa.scalar(tp.partition, pa.int32()), rows),
            offsets,
            pc.multiply(stamps_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(types)]),
        ]
        if self.include_headers:
            columns.append(_headers(rows, buffers))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        last = _rows_below(buffers.offsets, 0, rows, self.range.until)
        if last < rows:
            batch = batch.slice(0, last)
        dropped, self._dropped = self._dropped, []
        if dropped:
            keep = [True] * last
            for first, end in dropped:
                keep[first:end] = [False] * (min(end, last) - min(first, last))
            batch = batch.filter(pa.array(keep, pa.bool_()))
        return batch


def _rows_below(offsets: bytearray, first: int, end: int, offset: int) -> int:
    """The first row in [first, end) whose offset is `offset` or more (rows' offsets rise)."""
    low, high = first, end
    while low < high:
        middle = (low + high) // 2
        if _INT64.unpack_from(offsets, 8 * middle)[0] < offset:
            low = middle + 1
        else:
            high = middle
    return low


def _is_abort(batch: memoryview) -> bool:
    """Whether a control batch is an abort marker; other control records (none but
    transaction markers reach a partition today) are passed over, as Kafka's consumer
    passes over control types it does not know."""
    try:
        _, records = decode_batch(batch, verify_crc=False)
        return len(records) == 1 and not marker_of(records[0].key, records[0].value).commit
    except (RecordsError, MarkerError):
        return False


def _binary(rows: int, validity: bytearray, offsets: bytearray, data: bytearray) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(),
        rows,
        [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)],
    )


def _headers(rows: int, buffers: ColumnBuffers) -> pa.Array:
    """list<struct<key string, value binary>>; a record without headers is null, as the
    consumer reader gives it."""
    count = buffers.header_rows
    keys = pa.Array.from_buffers(
        pa.binary(),
        count,
        [None, pa.py_buffer(buffers.header_key_offsets), pa.py_buffer(buffers.header_key_data)],
    )
    try:
        names = keys.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: decoded with replacement characters
        names = pa.array([key.decode("utf-8", "replace") for key in keys.to_pylist()], pa.string())
    values = _binary(
        count,
        buffers.header_value_validity,
        buffers.header_value_offsets,
        buffers.header_value_data,
    )
    entries = pa.StructArray.from_arrays([names, values], fields=list(HEADER_TYPE))
    starts = pa.Array.from_buffers(
        pa.int32(), rows + 1, [None, pa.py_buffer(buffers.header_list_offsets)]
    )
    empty = pc.equal(pc.subtract(starts.slice(1), starts.slice(0, rows)), 0)
    return pa.ListArray.from_arrays(starts, entries, type=pa.list_(HEADER_TYPE), mask=empty)
