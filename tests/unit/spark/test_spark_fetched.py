"""RangeColumns: Fetch answers' record batches to Arrow batches, against a reference model.

A log is built from batches of plain records, transactional records and transaction
markers (some transactions aborted, one possibly left open), encoded as a broker stores
them. The model reads it record by record with the Python decoder and Kafka's
read_committed rule; RangeColumns must give the same rows for any range of it, however
the log is cut into Fetch answers.
"""

from __future__ import annotations

import datetime as dt
import struct
from dataclasses import dataclass
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from strom.protocol.batch_header import TimestampType
from strom.protocol.compression import Compression
from strom.protocol.markers import encode_marker_batch
from strom.protocol.record_codec import NewRecord, encode_batch
from strom.spark.arrow import arrow_read_schema
from strom.spark.errors import BrokerError
from strom.spark.fetched import RangeColumns
from strom.spark.offsets import OffsetRange, TopicPartition

TP = TopicPartition("t", 3)
BASE_TS = 1_700_000_000_000
Row = tuple[int, bytes | None, bytes | None, int, int, tuple[tuple[str, bytes | None], ...] | None]


@dataclass
class Log:
    data: bytes
    batch_starts: list[int]  # byte position of each batch
    rows: list[Row]  # every record: offset, key, value, timestamp ms, type, headers
    aborted_offsets: set[int]  # offsets of records in aborted transactions
    aborted: list[tuple[int, int, int]]  # (producer id, first offset, marker offset)
    end: int


def _with_offset(batch: bytes, base_offset: int) -> bytes:
    return struct.pack(">q", base_offset) + batch[8:]  # the CRC does not cover it


headers_st = st.lists(
    st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2
).map(tuple)
record_st = st.tuples(
    st.none() | st.binary(max_size=6),
    st.none() | st.binary(max_size=12),
    headers_st,
    st.integers(-5_000, 5_000),
)
# ("data", records, codec, log append) | ("txn", producer, records) | ("end", producer, commit)
step_st = st.one_of(
    st.tuples(
        st.just("data"),
        st.lists(record_st, min_size=1, max_size=5),
        st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4]),
        st.booleans(),
    ),
    st.tuples(st.just("txn"), st.integers(1, 2), st.lists(record_st, min_size=1, max_size=4)),
    st.tuples(st.just("end"), st.integers(1, 2), st.booleans()),
)
# A transaction in one step: its records, then its marker (abort when False).
whole_txn_st = st.tuples(
    st.integers(1, 2), st.lists(record_st, min_size=1, max_size=3), st.booleans()
)
steps_st = st.lists(
    st.one_of(
        step_st.map(lambda step: [step]),
        whole_txn_st.map(lambda t: [("txn", t[0], t[1]), ("end", t[0], t[2])]),
    ),
    min_size=1,
    max_size=8,
).map(lambda groups: [step for group in groups for step in group])


def build_log(steps: list[Any]) -> Log:
    data = bytearray()
    starts: list[int] = []
    rows: list[Row] = []
    open_txns: dict[int, tuple[int, list[int]]] = {}  # producer -> (first offset, offsets)
    aborted_offsets: set[int] = set()
    aborted: list[tuple[int, int, int]] = []
    offset = 0

    def add(batch: bytes, count: int) -> None:
        nonlocal offset
        starts.append(len(data))
        data.extend(_with_offset(batch, offset))
        offset += count

    def records_of(items: list[Any]) -> list[NewRecord]:
        return [NewRecord(k, v, list(h), BASE_TS + d) for k, v, h, d in items]

    for step in steps:
        if step[0] == "data":
            _, items, codec, log_append = step
            kind = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
            batch = encode_batch(
                records_of(items),
                base_timestamp_ms=BASE_TS,
                compression=codec,
                timestamp_type=kind,
            )
            stamp_max = max(BASE_TS + d for *_, d in items)
            for i, (k, v, h, d) in enumerate(items):
                stamp = stamp_max if log_append else BASE_TS + d
                rows.append((offset + i, k, v, stamp, int(log_append), h or None))
            add(batch, len(items))
        elif step[0] == "txn":
            _, producer, items = step
            first, offsets = open_txns.setdefault(producer, (offset, []))
            batch = encode_batch(
                records_of(items),
                base_timestamp_ms=BASE_TS,
                producer_id=producer,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
            for i, (k, v, h, d) in enumerate(items):
                rows.append((offset + i, k, v, BASE_TS + d, 0, h or None))
                offsets.append(offset + i)
            add(batch, len(items))
        else:
            _, producer, commit = step
            if producer not in open_txns:
                continue
            first, offsets = open_txns.pop(producer)
            if not commit:
                aborted.append((producer, first, offset))
                aborted_offsets.update(offsets)
            marker = encode_marker_batch(
                producer_id=producer,
                producer_epoch=0,
                commit=commit,
                coordinator_epoch=0,
                timestamp_ms=BASE_TS,
            )
            add(marker, 1)
    return Log(bytes(data), starts, rows, aborted_offsets, aborted, offset)


def read(log: Log, rng: OffsetRange, *, committed: bool, headers: bool, cut: int) -> list[Row]:
    """Feed RangeColumns answers as a broker would: from the batch holding the position,
    at most `cut` batches each (the last one torn in half), until the range is read."""
    columns = RangeColumns(rng, include_headers=headers, read_committed=committed)
    out: list[pa.RecordBatch] = []
    for _ in range(len(log.batch_starts) + 2):
        if columns.done:
            break
        first = _batch_holding(log, columns.position)
        if first is None:
            break
        stop = first + cut
        end = log.batch_starts[stop] if stop < len(log.batch_starts) else len(log.data)
        after = log.batch_starts[stop + 1] if stop + 1 < len(log.batch_starts) else len(log.data)
        after = max(after, end)
        torn = end + (after - end) // 2
        # As a broker lists them: the aborted transactions not over before the fetch offset.
        listed = [(p, begin) for p, begin, last in log.aborted if last >= columns.position]
        assert columns.take(log.data[log.batch_starts[first] : torn], listed)
        if columns.rows >= 3:
            out.append(columns.build())
    out.append(columns.build())
    result: list[Row] = []
    for batch in out:
        assert batch.schema == arrow_read_schema(headers)
        for row in batch.to_pylist():
            assert (row["topic"], row["partition"]) == ("t", 3)
            stamp = row["timestamp"]
            ms = (stamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
            found = row["headers"] if headers else None
            result.append(
                (
                    row["offset"],
                    row["key"],
                    row["value"],
                    ms,
                    row["timestampType"],
                    None if found is None else tuple((h["key"], h["value"]) for h in found),
                )
            )
    return result


def _batch_holding(log: Log, position: int) -> int | None:
    """The index of the first batch whose records end after `position`."""
    for index, end in enumerate(_batch_ends(log)):
        if end > position:
            return index
    return None


def _batch_ends(log: Log) -> list[int]:
    ends = []
    for start in log.batch_starts:
        (base,) = struct.unpack_from(">q", log.data, start)
        (last_delta,) = struct.unpack_from(">i", log.data, start + 23)
        ends.append(base + last_delta + 1)
    return ends


def expected(log: Log, rng: OffsetRange, *, committed: bool, headers: bool) -> list[Row]:
    return [
        (o, k, v, ts, kind, h if headers else None)
        for o, k, v, ts, kind, h in log.rows
        if rng.start <= o < rng.until and not (committed and o in log.aborted_offsets)
    ]


@settings(max_examples=200, deadline=None)
@given(
    steps=steps_st,
    bounds=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    committed=st.booleans(),
    headers=st.booleans(),
    cut=st.integers(1, 4),
)
def test_range_columns_read_what_the_model_reads(
    steps: list[Any], bounds: tuple[int, int], committed: bool, headers: bool, cut: int
) -> None:
    log = build_log(steps)
    start, until = sorted(min(b, log.end) for b in bounds)
    rng = OffsetRange(TP, start, until)
    assert read(log, rng, committed=committed, headers=headers, cut=cut) == expected(
        log, rng, committed=committed, headers=headers
    )


def test_a_range_inside_one_batch_is_cut_to_the_range() -> None:
    log = build_log(
        [("data", [(b"k", bytes([i]), (), 0) for i in range(5)], Compression.NONE, False)]
    )
    rows = read(log, OffsetRange(TP, 1, 3), committed=False, headers=False, cut=1)
    assert [(o, v) for o, _, v, *_ in rows] == [(1, b"\x01"), (2, b"\x02")]


def test_records_before_a_new_log_start_are_not_read_even_where_their_batch_is() -> None:
    log = build_log(
        [("data", [(None, bytes([i]), (), 0) for i in range(5)], Compression.NONE, False)]
    )
    columns = RangeColumns(OffsetRange(TP, 0, 5), include_headers=False, read_committed=False)
    columns.skip_to(2)  # DeleteRecords moved the log start into the batch
    assert columns.take(log.data)
    assert columns.build().column("offset").to_pylist() == [2, 3, 4]


def test_an_aborted_transaction_is_skipped_only_with_read_committed() -> None:
    log = build_log(
        [
            ("txn", 1, [(None, b"gone", (), 0)]),
            ("txn", 2, [(None, b"kept", (), 0)]),
            ("end", 1, False),
            ("end", 2, True),
        ]
    )
    whole = OffsetRange(TP, 0, log.end)
    committed = read(log, whole, committed=True, headers=False, cut=4)
    assert [v for _, _, v, *_ in committed] == [b"kept"]
    uncommitted = read(log, whole, committed=False, headers=False, cut=4)
    assert [v for _, _, v, *_ in uncommitted] == [b"gone", b"kept"]


def test_an_answer_without_a_complete_batch_takes_nothing() -> None:
    log = build_log([("data", [(None, b"v" * 50, (), 0)], Compression.NONE, False)])
    columns = RangeColumns(OffsetRange(TP, 0, 1), include_headers=False, read_committed=False)
    assert not columns.take(b"")
    assert not columns.take(log.data[:-1])
    assert columns.position == 0 and columns.rows == 0


def test_a_corrupt_batch_fails_the_read_with_its_offset() -> None:
    log = build_log([("data", [(None, b"value", (), 0)], Compression.NONE, False)])
    damaged = bytearray(log.data)
    damaged[-1] ^= 0xFF
    columns = RangeColumns(OffsetRange(TP, 0, 1), include_headers=False, read_committed=False)
    with pytest.raises(BrokerError, match="offset 0 is corrupt"):
        columns.take(bytes(damaged))


def _with_crc(batch: bytearray) -> bytes:
    """The batch with its CRC made right again, so damage reaches the decoder."""
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


@settings(max_examples=200, deadline=None)
@example(  # the first record's offset delta damaged to -1: a row before the batch's base
    steps=[
        ("txn", 1, [(None, None, (), 64)]),
        ("data", [(None, None, (), 0)], Compression.NONE, False),
    ],
    damage=[(65, 1)],
    committed=False,
    headers=False,
)
@given(
    steps=steps_st,
    damage=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    committed=st.booleans(),
    headers=st.booleans(),
)
def test_a_damaged_answer_fails_the_read_cleanly_or_reads_the_range(
    steps: list[Any], damage: list[tuple[int, int]], committed: bool, headers: bool
) -> None:
    """Bytes a broker should never send, but with CRCs that match: either a BrokerError
    naming the batch, or rows within the range; never another exception."""
    log = build_log(steps)
    assume(log.data)
    damaged = bytearray(log.data)
    for where, value in damage:  # anywhere, headers too, but the CRCs are made right
        damaged[where % len(damaged)] = value
    fixed = bytearray()
    for index, start in enumerate(log.batch_starts):
        end = log.batch_starts[index + 1] if index + 1 < len(log.batch_starts) else len(damaged)
        fixed += _with_crc(damaged[start:end])
    rng = OffsetRange(TP, 0, log.end)
    columns = RangeColumns(rng, include_headers=headers, read_committed=committed)
    try:
        columns.take(bytes(fixed), [(p, first) for p, first, _ in log.aborted])
        batch = columns.build()
    except BrokerError as exc:
        assert str(exc).startswith("strom: ")
        return
    offsets = batch.column("offset").to_pylist()
    assert offsets == sorted(set(offsets))
    assert all(0 <= o < log.end for o in offsets)
