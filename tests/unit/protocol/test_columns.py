"""decode_columns: a record batch's records into Arrow column buffers. The compiled
decoder (strom.protocol._walk) and its Python twin decode valid batches to what
decode_batch gives, append batch after batch, and on any bytes either agree byte for
byte or both refuse, leaving ``out`` as it was."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import columns
from strom.protocol.batch_header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    TIMESTAMP_TYPE_BIT,
    TimestampType,
    decompress_records,
    parse_batch_header,
)
from strom.protocol.columns import ColumnBuffers, DecodeColumns, decode_columns_py
from strom.protocol.compression import Compression
from strom.protocol.record_codec import NewRecord, Record, decode_batch, encode_batch

compiled: DecodeColumns | None
try:
    from strom.protocol import _walk

    compiled = _walk.decode_columns
except ImportError:  # no C compiler at install time
    compiled = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="strom.protocol._walk not built")
DECODERS = [
    pytest.param(decode_columns_py, id="python"),
    pytest.param(compiled, id="compiled", marks=needs_compiled),
]
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Section:
    """One batch's records section and the header fields decode_columns takes."""

    data: bytes
    pos: int
    end: int
    count: int
    base_offset: int = 0
    first_timestamp: int = 0
    max_timestamp: int = 0
    log_append_time: bool = False

    def decode(
        self, decoder: DecodeColumns, buffers: ColumnBuffers, with_headers: bool = True
    ) -> None:
        decoder(
            self.data,
            self.pos,
            self.end,
            self.count,
            self.base_offset,
            self.first_timestamp,
            self.max_timestamp,
            self.log_append_time,
            with_headers,
            buffers.out,
        )


def section(batch: bytes) -> Section:
    header = parse_batch_header(batch)
    codec = header.attributes & COMPRESSION_MASK
    data, pos, end = batch, BATCH_HEADER_SIZE, header.size_bytes
    if codec != Compression.NONE:
        data = bytes(decompress_records(codec, batch[pos:end], 1 << 24, ""))
        pos, end = 0, len(data)
    return Section(
        data,
        pos,
        end,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        header.max_timestamp,
        bool(header.attributes & TIMESTAMP_TYPE_BIT),
    )


def copied(buffers: ColumnBuffers) -> ColumnBuffers:
    return ColumnBuffers(*(bytearray(column) for column in buffers.out))


def read_back(buffers: ColumnBuffers, with_headers: bool = True) -> list[Record]:
    """The rows, read through pyarrow arrays built on (copies of) the buffers."""
    rows = buffers.rows

    def array(kind: pa.DataType, length: int, *parts: bytearray | None) -> pa.Array:
        made = pa.Array.from_buffers(
            kind, length, [None if p is None else pa.py_buffer(bytes(p)) for p in parts]
        )
        made.validate(full=True)
        return made

    offsets = array(pa.int64(), rows, None, buffers.offsets).to_pylist()
    timestamps = array(pa.int64(), rows, None, buffers.timestamps).to_pylist()
    keys = array(
        pa.binary(), rows, buffers.key_validity, buffers.key_offsets, buffers.key_data
    ).to_pylist()
    values = array(
        pa.binary(), rows, buffers.value_validity, buffers.value_offsets, buffers.value_data
    ).to_pylist()
    headers: list[tuple[tuple[str, bytes | None], ...]] = [()] * rows
    if with_headers:
        header_rows = buffers.header_rows
        header_keys = array(
            pa.string(), header_rows, None, buffers.header_key_offsets, buffers.header_key_data
        )
        header_values = array(
            pa.binary(),
            header_rows,
            buffers.header_value_validity,
            buffers.header_value_offsets,
            buffers.header_value_data,
        )
        kind = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        entries = pa.StructArray.from_arrays([header_keys, header_values], ["key", "value"])
        lists = pa.Array.from_buffers(
            kind, rows, [None, pa.py_buffer(bytes(buffers.header_list_offsets))], children=[entries]
        )
        lists.validate(full=True)
        headers = [tuple((h["key"], h["value"]) for h in row) for row in lists.to_pylist()]
    return [
        Record(*fields) for fields in zip(offsets, timestamps, keys, values, headers, strict=True)
    ]


def zigzag(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


def record(body: bytes) -> bytes:
    return zigzag(len(body)) + body


def body(
    key: bytes = zigzag(1) + b"k",
    value: bytes = zigzag(-1),
    headers: bytes = zigzag(0),
    timestamp_delta: bytes = zigzag(0),
    offset_delta: bytes = zigzag(0),
) -> bytes:
    return b"\x00" + timestamp_delta + offset_delta + key + value + headers


headers_strategy = st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3
)
records_strategy = st.lists(
    st.builds(
        NewRecord,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=40),
        headers=headers_strategy,
        timestamp_ms=st.none() | st.integers(-(2**40), 2**42),
    ),
    max_size=12,
)


@st.composite
def batches(draw: st.DrawFn, compressions: tuple[Compression, ...] = (Compression.NONE,)) -> bytes:
    return encode_batch(
        draw(records_strategy),
        base_timestamp_ms=draw(st.integers(0, 2**42)),
        base_offset=draw(st.integers(0, 2**50)),
        compression=draw(st.sampled_from(compressions)),
        timestamp_type=draw(st.sampled_from(TimestampType)),
    )


def prefilled() -> ColumnBuffers:
    """Buffers already holding 3 rows and 2 headers: their bitmaps end part-way."""
    buffers = ColumnBuffers()
    batch = encode_batch(
        [(b"a", None, [("h", None)]), (None, b"b", []), (b"", b"", [("i", b"j")])],
        base_timestamp_ms=1,
    )
    section(batch).decode(decode_columns_py, buffers)
    return buffers


def odd_bitmaps() -> ColumnBuffers:
    """Prefilled, but with bitmaps shorter than the rows (none) or with stale bits set."""
    buffers = prefilled()
    buffers.key_validity.clear()
    buffers.value_validity[:] = b"\xff\xff\xff"
    buffers.header_value_validity[:] = b"\xfe"
    return buffers


start_states = st.sampled_from([ColumnBuffers, prefilled, odd_bitmaps])


@pytest.mark.parametrize("decoder", DECODERS)
@settings(max_examples=150)
@given(batches((Compression.NONE, Compression.NONE, Compression.GZIP)))
def test_valid_batches_decode_as_decode_batch(decoder: DecodeColumns, batch: bytes) -> None:
    buffers = ColumnBuffers()
    section(batch).decode(decoder, buffers)
    assert read_back(buffers) == decode_batch(batch)[1]


@pytest.mark.parametrize("decoder", DECODERS)
def test_every_kind_of_field_decodes(decoder: DecodeColumns) -> None:
    records = [
        NewRecord(None, None),
        NewRecord(b"", b"", [("", b"")], timestamp_ms=999),
        NewRecord(b"key", b"v" * 300, [("a", None), ("b", b"x"), ("ü", None)], 1_001),
        NewRecord(None, b"value", [], timestamp_ms=-5),
    ]
    for timestamp_type in TimestampType:
        batch = encode_batch(
            records, base_timestamp_ms=1_000, base_offset=2**40, timestamp_type=timestamp_type
        )
        buffers = ColumnBuffers()
        section(batch).decode(decoder, buffers)
        decoded = decode_batch(batch)[1]
        assert read_back(buffers) == decoded
        assert [r.timestamp for r in decoded] == (
            [1_001] * 4
            if timestamp_type == TimestampType.LOG_APPEND_TIME
            else [1_000, 999, 1_001, -5]
        )
        assert (buffers.rows, buffers.header_rows) == (4, 4)
        assert buffers.key_validity == bytearray([0b0110])
        assert buffers.value_validity == bytearray([0b1110])
        assert buffers.header_value_validity == bytearray([0b0101])


@pytest.mark.parametrize("decoder", DECODERS)
@settings(max_examples=60)
@given(st.lists(batches(), max_size=5), st.booleans())
def test_batches_append_one_after_another(
    decoder: DecodeColumns, batch_list: list[bytes], with_headers: bool
) -> None:
    buffers = ColumnBuffers()
    expected: list[Record] = []
    for batch in batch_list:
        section(batch).decode(decoder, buffers, with_headers)
        expected += [r if with_headers else replace(r, headers=()) for r in decode_batch(batch)[1]]
    assert read_back(buffers, with_headers) == expected
    if not with_headers:  # the header columns are left as they were
        assert buffers.out[8:] == ColumnBuffers().out[8:]


def outcome(
    decoder: DecodeColumns, case: Section, with_headers: bool, start: ColumnBuffers
) -> ColumnBuffers | None:
    """The buffers after decoding, or None when the decoder refused (and left them)."""
    buffers = copied(start)
    try:
        case.decode(decoder, buffers, with_headers)
    except ValueError:
        assert buffers == start
        return None
    return buffers


@st.composite
def mutated_sections(draw: st.DrawFn) -> Section:
    """A valid batch's records with a byte changed, cut short, extended or miscounted,
    between some prefix and suffix."""
    valid = section(draw(batches()))
    records = bytearray(valid.data[valid.pos : valid.end])
    count = valid.count
    for _ in range(draw(st.integers(1, 3))):
        mutation = draw(st.sampled_from(["set", "set", "truncate", "extend", "count"]))
        if mutation == "set" and records:
            records[draw(st.integers(0, len(records) - 1))] = draw(st.integers(0, 255))
        elif mutation == "truncate":
            del records[draw(st.integers(0, len(records))) :]
        elif mutation == "extend":
            records += draw(st.binary(min_size=1, max_size=12))
        elif mutation == "count":
            count = max(count + draw(st.sampled_from([-1, 1])), 0)
    prefix, suffix = draw(st.binary(max_size=4)), draw(st.binary(max_size=4))
    return replace(
        valid,
        data=prefix + records + suffix,
        pos=len(prefix),
        end=len(prefix) + len(records),
        count=count,
    )


@needs_compiled
@settings(max_examples=600)
@given(mutated_sections(), st.booleans(), start_states)
def test_compiled_and_python_agree_on_mutated_batches(
    case: Section, with_headers: bool, start_state: Callable[[], ColumnBuffers]
) -> None:
    assert compiled is not None
    start = start_state()
    assert outcome(compiled, case, with_headers, start) == outcome(
        decode_columns_py, case, with_headers, start
    )


@needs_compiled
@settings(max_examples=400)
@given(
    st.binary(max_size=48),
    st.integers(-2, 50),
    st.integers(-2, 50),
    st.integers(-1, 6),
    st.sampled_from([0, 7, INT64_MAX, -(2**63)]),
    st.sampled_from([0, -1, INT64_MAX, -(2**63)]),
    st.booleans(),
    st.booleans(),
    start_states,
)
def test_compiled_and_python_agree_on_any_bytes(
    data: bytes,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    timestamp: int,
    log_append_time: bool,
    with_headers: bool,
    start_state: Callable[[], ColumnBuffers],
) -> None:
    assert compiled is not None
    case = Section(data, pos, end, count, base_offset, timestamp, timestamp, log_append_time)
    start = start_state()
    result = outcome(compiled, case, with_headers, start)
    assert result == outcome(decode_columns_py, case, with_headers, start)
    for same_bytes in (bytearray(data), memoryview(data)):
        as_other = replace(case, data=same_bytes)  # type: ignore[arg-type]
        assert outcome(compiled, as_other, with_headers, start) == result


GOOD = record(body())

BAD_RECORDS = {  # records, and how many the batch says there are
    "varint longer than 5 bytes": b"\x80\x80\x80\x80\x80\x00" + body(),
    "5-byte varint past int32": b"\xff\xff\xff\xff\x1f" + body(),
    "varlong longer than 10 bytes": record(body(timestamp_delta=b"\x80" * 10 + b"\x00")),
    "10-byte varlong past int64": record(body(timestamp_delta=b"\xff" * 9 + b"\x02")),
    "5-byte offset delta past int32": record(body(offset_delta=b"\x80\x80\x80\x80\x10")),
    "varint cut by the record's end": record(b"\x00\x80"),
    "varint cut by the section's end": b"\x80",
    "negative record length": zigzag(-1) + body(),
    "record length past the section": zigzag(len(body()) + 1) + body(),
    "empty record": zigzag(0),
    "key length -2": record(body(key=zigzag(-2))),
    "value length -2": record(body(value=zigzag(-2))),
    "key past its record": record(body(key=zigzag(50) + b"k")),
    "value past its record": record(body(value=zigzag(2) + b"v", headers=b"")),
    "negative header count": record(body(headers=zigzag(-1))),
    "null header key": record(body(headers=zigzag(1) + zigzag(-1) + zigzag(-1))),
    "header value length -2": record(body(headers=zigzag(1) + zigzag(0) + zigzag(-2))),
    "header past its record": record(body(headers=zigzag(2) + zigzag(0) + zigzag(-1))),
    "record longer than its fields": record(body() + b"\x00"),
    "record shorter than its fields": zigzag(len(body()) - 1) + body(),
    "bytes after the last record": GOOD + b"\x00",
    "more records than counted": GOOD + GOOD,
}
COUNTED = {"fewer records than counted": (GOOD, 2)}
COUNTED |= {name: (records, 1) for name, records in BAD_RECORDS.items()}


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize(("records", "count"), COUNTED.values(), ids=COUNTED.keys())
def test_malformed_records_are_refused(decoder: DecodeColumns, records: bytes, count: int) -> None:
    data = b"\xff" + records + b"\xff"  # bytes either side that must not be read
    case = Section(data, 1, 1 + len(records), count)
    start = prefilled()
    assert outcome(decoder, case, True, start) is None
    assert outcome(decoder, case, False, start) is None
    after_good = Section(GOOD + records, 0, len(GOOD + records), count + 1)
    assert outcome(decoder, after_good, True, start) is None
    assert outcome(decoder, Section(GOOD, 0, len(GOOD), 1), True, start) is not None


@pytest.mark.parametrize("decoder", DECODERS)
def test_widest_and_overlong_varints_are_accepted(decoder: DecodeColumns) -> None:
    """Deltas at the int32 and int64 limits (five and ten bytes), and a key length
    written in more bytes than it needs, as Kafka's own readers accept it."""
    deltas = [(2**31 - 1, INT64_MAX), (-(2**31), -(2**63))]
    records = b"".join(
        record(body(key=b"\x82\x00k", offset_delta=zigzag(o), timestamp_delta=zigzag(t)))
        for o, t in deltas
    )
    assert [len(zigzag(o)) for o, _ in deltas] == [5, 5]
    assert [len(zigzag(t)) for _, t in deltas] == [10, 10]
    buffers = ColumnBuffers()
    Section(records, 0, len(records), 2, base_offset=2**40).decode(decoder, buffers)
    assert read_back(buffers) == [Record(2**40 + o, t, b"k", None, ()) for o, t in deltas]


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize(
    ("pos", "end", "count"),
    [(0, len(GOOD), -1), (-1, len(GOOD), 1), (1, 0, 1), (0, len(GOOD) + 1, 1), (40, 41, 0)],
)
def test_bounds_and_count_out_of_range_are_refused(
    decoder: DecodeColumns, pos: int, end: int, count: int
) -> None:
    start = prefilled()
    assert outcome(decoder, Section(GOOD, pos, end, count), True, start) is None


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize(
    ("offset_delta", "timestamp_delta", "base_offset", "first_timestamp"),
    [(1, 0, INT64_MAX, 0), (-1, 0, -(2**63), 0), (0, 1, 0, INT64_MAX), (0, -1, 0, -(2**63))],
)
def test_offsets_and_timestamps_past_int64_are_refused(
    decoder: DecodeColumns,
    offset_delta: int,
    timestamp_delta: int,
    base_offset: int,
    first_timestamp: int,
) -> None:
    records = record(
        body(offset_delta=zigzag(offset_delta), timestamp_delta=zigzag(timestamp_delta))
    )
    case = Section(records, 0, len(records), 1, base_offset, first_timestamp, 5)
    start = prefilled()
    assert outcome(decoder, case, True, start) is None
    if timestamp_delta:  # with log-append time the record's own timestamp is not used
        assert outcome(decoder, replace(case, log_append_time=True), True, start) is not None


def refusing_outs() -> dict[str, Callable[[ColumnBuffers], object]]:
    def unstarted(k: int) -> Callable[[ColumnBuffers], object]:
        return lambda b: tuple(bytearray() if i == k else c for i, c in enumerate(b.out))

    return {
        "list": lambda b: list(b.out),
        "13 columns": lambda b: b.out[:13],
        "15 columns": lambda b: (*b.out, bytearray()),
        "bytes": lambda b: (*b.out[:13], bytes(b.out[13])),
        "one bytearray twice": lambda b: (*b.out[:13], b.out[0]),
        **{f"column {k} unstarted": unstarted(k) for k in (2, 5, 8, 9, 11)},
    }


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("make_out", refusing_outs().values(), ids=refusing_outs().keys())
def test_out_not_14_started_bytearrays_is_refused(
    decoder: DecodeColumns, make_out: Callable[[ColumnBuffers], object]
) -> None:
    buffers = prefilled()
    before = copied(buffers)
    with pytest.raises(ValueError):
        decoder(GOOD, 0, len(GOOD), 1, 0, 0, 0, False, True, make_out(buffers))  # type: ignore[arg-type]
    assert buffers == before


@pytest.mark.parametrize("decoder", DECODERS)
def test_header_columns_need_no_start_without_headers(decoder: DecodeColumns) -> None:
    out = tuple(bytearray() if k >= 8 else c for k, c in enumerate(ColumnBuffers().out))
    decoder(GOOD, 0, len(GOOD), 1, 0, 0, 0, False, False, out)
    assert out[8:] == (bytearray(),) * 6


@pytest.mark.parametrize("decoder", DECODERS)
def test_a_column_pinned_by_the_data_is_left_as_it_was(decoder: DecodeColumns) -> None:
    buffers = prefilled()
    buffers.key_data[:] = GOOD  # the data to decode is the bytearray it would grow
    before = copied(buffers)
    with pytest.raises(BufferError):
        decoder(buffers.key_data, 0, len(GOOD), 1, 0, 0, 0, False, True, buffers.out)
    assert buffers == before


def enough_memory(size_bytes: int) -> bool:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") > size_bytes
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not enough_memory(6 << 30), reason="needs a 2 GiB buffer")
def test_int32_offsets_past_2_gib_are_refused() -> None:
    """A data column already 2**31 bytes long takes no more rows, not even null ones."""
    big = bytearray(2**31)
    header = zigzag(1) + zigzag(1) + b"h" + zigzag(1) + b"v"
    records = record(body(key=zigzag(-1), headers=header))
    decoders = [decode_columns_py] if compiled is None else [decode_columns_py, compiled]
    for column in (columns.KEY_DATA, columns.VALUE_DATA):
        for decoder in decoders:
            out = list(ColumnBuffers().out)
            out[column] = big
            with pytest.raises(ValueError):
                decoder(records, 0, len(records), 1, 0, 0, 0, False, True, tuple(out))
            assert len(big) == 2**31 and all(len(c) <= 4 for c in out if c is not big)
            decoder(records, 0, 0, 0, 0, 0, 0, False, True, tuple(out))  # no rows: no offset
    for column in (columns.HEADER_KEY_DATA, columns.HEADER_VALUE_DATA):
        for decoder in decoders:
            out = list(ColumnBuffers().out)
            out[column] = big
            with pytest.raises(ValueError):
                decoder(records, 0, len(records), 1, 0, 0, 0, False, True, tuple(out))
            decoder(records, 0, len(records), 1, 0, 0, 0, False, False, tuple(out))
            assert len(big) == 2**31  # not written without headers


def test_column_buffers_start_empty_with_started_offsets() -> None:
    buffers = ColumnBuffers()
    assert (buffers.rows, buffers.header_rows) == (0, 0)
    assert len(buffers.out) == columns.COLUMN_COUNT
    started = {2, 5, 8, 9, 11}
    assert [bytes(c) for c in buffers.out] == [bytes(4) if k in started else b"" for k in range(14)]
    assert buffers.out[columns.HEADER_VALUE_VALIDITY] is buffers.header_value_validity


def test_compiled_decoder_is_bound_unless_pure_python_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pure = os.environ.get("STROM_PURE_PYTHON") == "1"
    runs_compiled = compiled is not None and not pure
    assert runs_compiled == columns.COMPILED_COLUMNS
    if columns.COMPILED_COLUMNS:
        assert columns.decode_columns is compiled
    monkeypatch.setenv("STROM_PURE_PYTHON", "1")
    assert columns._load_compiled() is None
    monkeypatch.delenv("STROM_PURE_PYTHON")
    assert columns._load_compiled() is compiled
