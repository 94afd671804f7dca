"""Record batch codec: validation, stamping, decoding, encoding."""

from __future__ import annotations

import contextlib
import struct

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.protocol.compression import compress
from strom.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    Compression,
    NewRecord,
    RecordsError,
    TimestampType,
    decode_batch,
    encode_batch,
    iter_batches,
    parse_batch_header,
    stamp_batch,
    validate_batches,
)

MAX = 10 * 1024 * 1024


def _records(n: int, size: int = 20) -> list[NewRecord]:
    return [
        NewRecord(
            key=None if i % 3 == 0 else f"key-{i}".encode(),
            value=None if i % 5 == 4 else bytes([i % 251]) * size,
            headers=[("h", b"x"), ("n", None)] if i % 2 else (),
            timestamp_ms=1_000 + i * 7,
        )
        for i in range(n)
    ]


def _patch(batch: bytes, fmt: str, pos: int, value: int) -> bytes:
    """Change a header field and recompute the CRC."""
    data = bytearray(batch)
    struct.pack_into(fmt, data, pos, value)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _with_payload(batch: bytes, payload: bytes, codec: Compression) -> bytes:
    """Replace a batch's records section (e.g. with another compression framing)."""
    header = bytearray(batch[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(payload))
    attributes = struct.unpack_from(">h", header, 21)[0] & ~0x07 | codec
    struct.pack_into(">h", header, 21, attributes)
    data = header + payload
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _error(excinfo: pytest.ExceptionInfo[RecordsError]) -> ErrorCode:
    return excinfo.value.error_code


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_each_codec(codec: Compression) -> None:
    records = _records(50, size=200)
    batch = encode_batch(
        records,
        base_offset=7,
        base_timestamp_ms=1_000,
        compression=codec,
        producer_id=12,
        producer_epoch=3,
        base_sequence=40,
    )
    [(view, header)] = validate_batches(batch, max_batch_bytes=MAX)
    assert bytes(view) == batch
    assert header.compression == codec
    assert header.records_count == 50 and header.last_offset_delta == 49
    assert header.max_timestamp == 1_000 + 49 * 7
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (12, 3, 40)
    assert header.last_sequence == 89
    decoded_header, decoded = decode_batch(batch)
    assert decoded_header == header
    assert [r.offset for r in decoded] == list(range(7, 57))
    for record, original in zip(decoded, records, strict=True):
        assert record.key == original.key
        assert record.value == original.value
        assert record.headers == tuple(original.headers)
        assert record.timestamp == original.timestamp_ms
    if codec != Compression.NONE:
        assert len(batch) < len(encode_batch(records, base_timestamp_ms=1_000))


def test_tuple_records_and_defaults() -> None:
    batch = encode_batch([(b"k", b"v", [("a", b"1")]), (None, None, [])], base_timestamp_ms=5)
    header, records = decode_batch(batch)
    assert header.base_offset == 0 and header.producer_id == -1
    assert header.timestamp_type == TimestampType.CREATE_TIME
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (b"k", b"v", (("a", b"1"),), 5),
        (None, None, (), 5),
    ]


def test_raw_snappy_block_as_librdkafka_writes_it() -> None:
    plain = encode_batch(_records(20), base_timestamp_ms=1_000)
    payload = bytes(cramjam.snappy.compress_raw(plain[BATCH_HEADER_SIZE:]))
    batch = _with_payload(plain, payload, Compression.SNAPPY)
    validate_batches(batch, max_batch_bytes=MAX)
    assert decode_batch(batch)[1] == decode_batch(plain)[1]


def test_xerial_snappy_framing_with_several_blocks() -> None:
    batch = encode_batch(
        _records(400, size=300), base_timestamp_ms=1, compression=Compression.SNAPPY
    )
    assert batch[BATCH_HEADER_SIZE:].startswith(b"\x82SNAPPY\x00")
    assert len(decode_batch(batch)[1]) == 400


def test_kafka_python_batches_decode_and_ours_decode_in_kafka_python() -> None:
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=1,
        is_transactional=False,
        producer_id=5,
        producer_epoch=1,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(30):
        builder.append(i, timestamp=1_000 + i, key=b"k", value=b"v" * 100, headers=[("h", b"1")])
    theirs = bytes(builder.build())
    [(_, header)] = validate_batches(theirs, max_batch_bytes=MAX)
    assert header.compression == Compression.GZIP
    records = decode_batch(theirs)[1]
    assert [r.timestamp for r in records] == [1_000 + i for i in range(30)]
    assert records[0].headers == (("h", b"1"),)

    ours = encode_batch(_records(10), base_timestamp_ms=1_000, compression=Compression.GZIP)
    parsed = DefaultRecordBatch(ours)
    assert parsed.validate_crc()
    assert [r.value for r in parsed] == [r.value for r in _records(10)]


def test_crc_corruption_is_detected() -> None:
    batch = bytearray(encode_batch(_records(5), base_timestamp_ms=1))
    batch[len(batch) // 2] ^= 0x01
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(bytes(batch), max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.corrupt_message
    with pytest.raises(RecordsError) as excinfo:
        decode_batch(bytes(batch))
    assert _error(excinfo) == ErrorCode.corrupt_message


def test_prefix_is_not_covered_by_crc() -> None:
    batch = bytearray(encode_batch(_records(5), base_timestamp_ms=1))
    batch[0:8] = (123).to_bytes(8, "big")
    batch[12:16] = (9).to_bytes(4, "big")
    [(_, header)] = validate_batches(bytes(batch), max_batch_bytes=MAX)
    assert header.base_offset == 123 and header.partition_leader_epoch == 9


def test_every_truncation_is_corrupt() -> None:
    batch = encode_batch(_records(3), base_timestamp_ms=1)
    for cut in range(1, len(batch)):
        with pytest.raises(RecordsError) as excinfo:
            validate_batches(batch[:cut], max_batch_bytes=MAX)
        assert _error(excinfo) == ErrorCode.corrupt_message, cut
        with pytest.raises(RecordsError):
            decode_batch(batch[:cut])
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch + batch[:30], max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.corrupt_message


def test_empty_records_are_corrupt() -> None:
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(b"", max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.corrupt_message


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_wrong_magic(magic: int) -> None:
    batch = bytearray(encode_batch(_records(3), base_timestamp_ms=1))
    batch[16] = magic
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(bytes(batch), max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.unsupported_for_message_format
    assert f"magic {magic}" in str(excinfo.value)
    with pytest.raises(RecordsError) as excinfo:
        decode_batch(bytes(batch))
    assert _error(excinfo) == ErrorCode.unsupported_for_message_format


def test_small_batch_length_is_corrupt() -> None:
    batch = bytearray(encode_batch(_records(3), base_timestamp_ms=1))
    batch[8:12] = (20).to_bytes(4, "big")
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(bytes(batch), max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.corrupt_message


def test_record_count_must_match_records() -> None:
    batch = encode_batch(_records(3), base_timestamp_ms=1)
    too_many = _patch(_patch(batch, ">i", 57, 4), ">i", 23, 3)
    too_few = _patch(_patch(batch, ">i", 57, 2), ">i", 23, 1)
    for bad in (too_many, too_few):
        with pytest.raises(RecordsError) as excinfo:
            validate_batches(bad, max_batch_bytes=MAX)
        assert _error(excinfo) == ErrorCode.invalid_record
        with pytest.raises(RecordsError):
            decode_batch(bad)


def test_last_offset_delta_must_match_count() -> None:
    batch = _patch(encode_batch(_records(3), base_timestamp_ms=1), ">i", 23, 5)
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.invalid_record


def test_empty_batch_from_client_is_invalid() -> None:
    batch = encode_batch([], base_timestamp_ms=1)
    assert decode_batch(batch)[1] == []
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.invalid_record


def test_control_batch_from_client_is_invalid() -> None:
    batch = encode_batch(_records(1), base_timestamp_ms=1, is_control=True)
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.invalid_record


def test_batch_too_large() -> None:
    batch = encode_batch(_records(10), base_timestamp_ms=1)
    validate_batches(batch, max_batch_bytes=len(batch))
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=len(batch) - 1)
    assert _error(excinfo) == ErrorCode.message_too_large


def test_several_batches_are_split_without_copies() -> None:
    first = encode_batch(_records(3), base_timestamp_ms=1)
    second = encode_batch(_records(4), base_timestamp_ms=2, compression=Compression.LZ4)
    data = first + second
    batches = validate_batches(data, max_batch_bytes=MAX)
    assert [bytes(v) for v, _ in batches] == [first, second]
    assert all(v.obj is data for v, _ in batches)
    from_view = validate_batches(memoryview(data), max_batch_bytes=MAX)
    assert [h for _, h in from_view] == [h for _, h in batches]


def test_iter_batches_stops_at_torn_tail() -> None:
    first = encode_batch(_records(3), base_timestamp_ms=1)
    second = encode_batch(_records(4), base_timestamp_ms=2)
    data = first + second
    assert [pos for pos, _ in iter_batches(data)] == [0, len(first)]
    assert [pos for pos, _ in iter_batches(data[:-1])] == [0]
    assert [pos for pos, _ in iter_batches(data, len(first))] == [len(first)]
    assert list(iter_batches(data[:10])) == []


def test_header_properties() -> None:
    header = parse_batch_header(
        encode_batch(
            _records(3),
            base_timestamp_ms=1,
            base_offset=10,
            is_transactional=True,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            producer_id=1,
            producer_epoch=0,
            base_sequence=2**31 - 2,
        )
    )
    assert header.size_bytes == header.batch_length + 12
    assert header.last_offset == 12
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.last_sequence == 0  # 2**31 - 2 + 2 wraps past 2**31 - 1
    no_seq = BatchHeader(0, 49, 0, 2, 0, 0, 4, 0, 0, -1, -1, -1, 5)
    assert no_seq.last_sequence == -1
    with pytest.raises(RecordsError):
        parse_batch_header(b"\x00" * 60)


def test_stamping_rewrites_prefix_and_keeps_crc() -> None:
    batch = encode_batch(_records(5), base_timestamp_ms=1_000)
    [(view, header)] = validate_batches(batch, max_batch_bytes=MAX)
    pieces = stamp_batch(view, header, base_offset=1_000, leader_epoch=7, log_append_time_ms=None)
    assert len(pieces) == 2 and isinstance(pieces[1], memoryview)
    stamped = b"".join(bytes(p) for p in pieces)
    [(_, new_header)] = validate_batches(stamped, max_batch_bytes=MAX)
    assert new_header.base_offset == 1_000 and new_header.partition_leader_epoch == 7
    assert new_header.crc == header.crc
    assert [r.offset for r in decode_batch(stamped)[1]] == list(range(1_000, 1_005))


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_log_append_time_stamping_recomputes_crc(codec: Compression) -> None:
    batch = encode_batch(_records(5), base_timestamp_ms=1_000, compression=codec)
    [(view, header)] = validate_batches(batch, max_batch_bytes=MAX)
    pieces = stamp_batch(view, header, base_offset=50, leader_epoch=2, log_append_time_ms=99_999)
    stamped = b"".join(bytes(p) for p in pieces)
    [(_, new_header)] = validate_batches(stamped, max_batch_bytes=MAX)
    assert new_header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert new_header.max_timestamp == 99_999
    assert new_header.base_timestamp == header.base_timestamp
    assert new_header.compression == codec
    decoded = decode_batch(stamped)[1]
    assert {r.timestamp for r in decoded} == {99_999}
    assert [r.offset for r in decoded] == list(range(50, 55))
    assert bytes(view) == batch  # the client's buffer is untouched


COMPRESSED = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    "garbage",
    [
        b"\x82SNAPPY\x00garbage-garbage",
        b"\x1f\x8b" + b"garbage!" * 4,
        b"\x04\x22\x4d\x18" + b"garbage!" * 4,
        b"\x28\xb5\x2f\xfd" + b"garbage!" * 4,
        b"",
    ],
)
def test_undecodable_compressed_payload_is_corrupt(codec: Compression, garbage: bytes) -> None:
    batch = _with_payload(encode_batch(_records(5), base_timestamp_ms=1), garbage, codec)
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.corrupt_message
    assert "batch at position 0" in str(excinfo.value)
    with pytest.raises(RecordsError) as excinfo:
        decode_batch(batch)
    assert _error(excinfo) == ErrorCode.corrupt_message


def test_undecodable_batch_after_a_good_one_names_its_position() -> None:
    good = encode_batch(_records(3), base_timestamp_ms=1, compression=Compression.LZ4)
    bad = _with_payload(good, b"\x04\x22\x4d\x18garbage", Compression.LZ4)
    with pytest.raises(RecordsError, match=f"batch at position {len(good)}"):
        validate_batches(good + bad, max_batch_bytes=MAX)


def test_unknown_codec_is_unsupported() -> None:
    plain = encode_batch(_records(5), base_timestamp_ms=1)
    unknown = _patch(_with_payload(plain, b"abc", Compression.NONE), ">h", 21, 6)
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(unknown, max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.unsupported_compression_type
    with pytest.raises(RecordsError) as excinfo:
        decode_batch(unknown)
    assert _error(excinfo) == ErrorCode.unsupported_compression_type


def _framed(records: bytes, codec: Compression, count: int) -> bytes:
    """A batch of ``count`` records whose records section is ``records``, compressed."""
    template = encode_batch(_records(count), base_timestamp_ms=1)
    return _with_payload(template, compress(codec, records), codec)


def _record_bytes(n: int) -> bytes:
    return encode_batch(_records(n), base_timestamp_ms=1)[BATCH_HEADER_SIZE:]


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize(
    ("case", "records", "count"),
    [
        ("fewer-records", _record_bytes(3), 4),
        ("more-records", _record_bytes(4), 3),
        ("trailing-bytes", _record_bytes(3) + b"\x00", 3),
        ("truncated-record", _record_bytes(3)[:-1], 3),
        ("negative-length", b"\x01" + _record_bytes(3)[1:], 3),
        ("length-too-small", b"\x0a" + bytes(5), 1),
        ("nothing", b"", 1),
    ],
)
def test_compressed_records_must_fill_the_batch(
    codec: Compression, case: str, records: bytes, count: int
) -> None:
    batch = _framed(records, codec, count)
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=MAX)
    assert _error(excinfo) == ErrorCode.invalid_record, case
    assert f"count {count}" in str(excinfo.value)
    with pytest.raises(RecordsError):
        decode_batch(batch)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompressed_size_is_bounded(codec: Compression) -> None:
    batch = encode_batch(_records(50, size=300), base_timestamp_ms=1, compression=codec)
    plain_size = len(encode_batch(_records(50, size=300), base_timestamp_ms=1))
    records_size = plain_size - BATCH_HEADER_SIZE
    validate_batches(batch, max_batch_bytes=MAX, max_decompressed_bytes=records_size)
    assert len(decode_batch(batch, max_decompressed_bytes=records_size)[1]) == 50
    with pytest.raises(RecordsError) as excinfo:
        validate_batches(batch, max_batch_bytes=MAX, max_decompressed_bytes=records_size - 1)
    assert _error(excinfo) == ErrorCode.invalid_record
    assert f"the limit is {records_size - 1}" in str(excinfo.value)
    with pytest.raises(RecordsError) as excinfo:
        decode_batch(batch, max_decompressed_bytes=records_size - 1)
    assert _error(excinfo) == ErrorCode.invalid_record


def test_uncompressed_batches_ignore_the_decompression_bound() -> None:
    batch = encode_batch(_records(50, size=300), base_timestamp_ms=1)
    validate_batches(batch, max_batch_bytes=MAX, max_decompressed_bytes=1)
    decode_batch(batch, max_decompressed_bytes=1)


# ------------------------------------------------------------------------- properties

_headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
_record = st.builds(
    NewRecord,
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=300),
    headers=_headers,
    timestamp_ms=st.none() | st.integers(min_value=0, max_value=2**41),
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_record, min_size=1, max_size=30),
    codec=st.sampled_from(list(Compression)),
    base_offset=st.integers(min_value=0, max_value=2**40),
    base_timestamp=st.integers(min_value=0, max_value=2**41),
)
def test_encode_decode_round_trip(
    records: list[NewRecord], codec: Compression, base_offset: int, base_timestamp: int
) -> None:
    batch = encode_batch(
        records, base_offset=base_offset, base_timestamp_ms=base_timestamp, compression=codec
    )
    [(_, header)] = validate_batches(batch, max_batch_bytes=MAX)
    _, decoded = decode_batch(batch)
    assert len(decoded) == len(records)
    for i, (record, original) in enumerate(zip(decoded, records, strict=True)):
        assert record.offset == base_offset + i
        assert (record.key, record.value) == (original.key, original.value)
        assert record.headers == tuple(original.headers)
        expected_ts = base_timestamp if original.timestamp_ms is None else original.timestamp_ms
        assert record.timestamp == expected_ts
    assert header.max_timestamp == max(r.timestamp for r in decoded)


def _check_never_crashes(data: bytes) -> None:
    """Only RecordsError may escape; a batch that validates may still fail to decode
    (validation walks record lengths only), but only with RecordsError."""
    try:
        batches = validate_batches(data, max_batch_bytes=MAX)
    except RecordsError:
        batches = []
    for view, _ in batches:
        with contextlib.suppress(RecordsError):
            decode_batch(view)
    with contextlib.suppress(RecordsError):
        decode_batch(data, verify_crc=False)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    _check_never_crashes(data)


_magic_then_bytes = st.sampled_from(
    [
        b"\x1f\x8b\x08\x00",
        b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
        b"\x04\x22\x4d\x18",
        b"\x28\xb5\x2f\xfd",
    ]
).flatmap(lambda magic: st.binary(max_size=300).map(lambda tail: magic + tail))


@settings(max_examples=400, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    payload=st.binary(max_size=300) | _magic_then_bytes,
    count=st.integers(min_value=1, max_value=5),
)
def test_arbitrary_compressed_payload_never_crashes(
    codec: Compression, payload: bytes, count: int
) -> None:
    """Any bytes as a batch's compressed records, with a valid CRC: validated or refused
    with RecordsError, never another exception."""
    batch = _with_payload(encode_batch(_records(count), base_timestamp_ms=1), payload, codec)
    for max_decompressed_bytes in (64, 1 << 20):
        with contextlib.suppress(RecordsError):
            validate_batches(
                batch, max_batch_bytes=MAX, max_decompressed_bytes=max_decompressed_bytes
            )
        with contextlib.suppress(RecordsError):
            decode_batch(batch, max_decompressed_bytes=max_decompressed_bytes)


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    records=st.binary(max_size=300)
    | st.lists(_record, min_size=1, max_size=4).map(
        lambda records: encode_batch(records, base_timestamp_ms=1)[BATCH_HEADER_SIZE:]
    ),
    count=st.integers(min_value=1, max_value=5),
)
def test_well_compressed_records_are_judged_by_their_framing(
    codec: Compression, records: bytes, count: int
) -> None:
    """Validly compressed records: accepted exactly when the uncompressed batch would be."""
    plain = _with_payload(
        encode_batch(_records(count), base_timestamp_ms=1), records, Compression.NONE
    )
    batch = _with_payload(plain, compress(codec, records), codec)
    try:
        validate_batches(plain, max_batch_bytes=MAX)
    except RecordsError as exc:
        with pytest.raises(RecordsError) as excinfo:
            validate_batches(batch, max_batch_bytes=MAX)
        assert _error(excinfo) == exc.error_code == ErrorCode.invalid_record
    else:
        validate_batches(batch, max_batch_bytes=MAX)


_valid_batches = st.builds(
    lambda records, codec: encode_batch(records, base_timestamp_ms=1_000, compression=codec),
    st.lists(_record, min_size=1, max_size=5),
    st.sampled_from(list(Compression)),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=_valid_batches,
    mutations=st.lists(
        st.tuples(
            st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
            st.integers(min_value=0, max_value=10_000),
            st.integers(min_value=0, max_value=255),
        ),
        min_size=1,
        max_size=4,
    ),
    fix_crc=st.booleans(),
)
def test_mutated_batches_never_crash(
    batch: bytes, mutations: list[tuple[str, int, int]], fix_crc: bool
) -> None:
    data = bytearray(batch)
    for kind, where, value in mutations:
        pos = where % (len(data) + 1)
        if kind == "flip" and pos < len(data):
            data[pos] ^= 1 << (value % 8)
        elif kind == "set" and pos < len(data):
            data[pos] = value
        elif kind == "cut":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = bytes([value])
        elif kind == "delete" and pos < len(data):
            del data[pos]
    if fix_crc and len(data) >= BATCH_HEADER_SIZE:
        # Exercise the record walker too: a "valid" CRC over damaged records.
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    _check_never_crashes(bytes(data))
