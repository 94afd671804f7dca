"""`__transaction_state` records: Kafka's layout byte for byte, both value versions."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.txn.records import (
    TxnLogValue,
    TxnRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.txn.state import TxnState

ONGOING = TxnLogValue(
    producer_id=4000,
    producer_epoch=3,
    timeout_ms=60000,
    state=TxnState.ONGOING,
    partitions=frozenset({("orders", 2), ("orders", 0), ("audit", 1)}),
    last_update_ms=1_700_000_000_500,
    start_ms=1_700_000_000_000,
    previous_producer_id=3999,
    client_transaction_version=2,
)


def test_the_key_is_version_0_and_an_int16_length_string() -> None:
    assert encode_key("payments-7") == b"\x00\x00\x00\x0apayments-7"
    assert decode_key(b"\x00\x00\x00\x0apayments-7") == "payments-7"


def test_a_version_0_value_is_laid_out_field_by_field() -> None:
    expected = (
        struct.pack(">hqhib", 0, 4000, 3, 60000, 1)
        + struct.pack(">i", 2)  # two topics, sorted
        + struct.pack(">h", 5)
        + b"audit"
        + struct.pack(">ii", 1, 1)
        + struct.pack(">h", 6)
        + b"orders"
        + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)
    )
    assert encode_value(ONGOING, version=0) == expected
    read = decode_value(expected)
    assert read.partitions == ONGOING.partitions
    # version 0 has no room for these: they read back as their defaults
    assert (read.previous_producer_id, read.next_producer_id) == (-1, -1)
    assert read.client_transaction_version == 0


def test_a_version_1_value_is_compact_with_tagged_fields_only_when_not_default() -> None:
    expected = (
        struct.pack(">hqhib", 1, 4000, 3, 60000, 1)
        + b"\x03"  # two topics, as length + 1
        + b"\x06audit"
        + b"\x02"
        + struct.pack(">i", 1)
        + b"\x00"
        + b"\x07orders"
        + b"\x03"
        + struct.pack(">ii", 0, 2)
        + b"\x00"
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)
        + b"\x02"  # two tagged fields: the previous producer id and the client's version
        + b"\x00\x08"
        + struct.pack(">q", 3999)
        + b"\x02\x02"
        + struct.pack(">h", 2)
    )
    assert encode_value(ONGOING, version=1) == expected
    assert decode_value(expected) == ONGOING


def test_an_empty_transaction_writes_a_null_partition_list() -> None:
    empty = TxnLogValue(7, 0, 60000, TxnState.EMPTY, frozenset(), 10, -1)
    assert encode_value(empty, version=0)[17:21] == b"\xff\xff\xff\xff"
    assert encode_value(empty, version=1)[17:18] == b"\x00"
    assert decode_value(encode_value(empty, version=1)) == empty
    with pytest.raises(ValueError, match="EMPTY transaction has no partitions"):
        encode_value(TxnLogValue(7, 0, 1, TxnState.EMPTY, frozenset({("t", 0)}), 1, 1), version=1)


def test_unknown_tagged_fields_are_skipped() -> None:
    empty = TxnLogValue(7, 0, 60000, TxnState.COMPLETE_COMMIT, frozenset(), 10, 5)
    data = encode_value(empty, version=1)
    assert data.endswith(b"\x00")
    with_unknown = data[:-1] + b"\x01\x09\x03abc"
    assert decode_value(with_unknown) == empty


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x02" + bytes(30), "unknown transaction log value version 2"),
        (struct.pack(">hqhib", 0, 1, 0, 1, 9) + bytes(20), "unknown transaction status 9"),
        (struct.pack(">hqhi", 0, 1, 0, 1), "ends early"),
        (struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 1_000_000), "array of"),
    ],
)
def test_damaged_values_raise_a_record_error(data: bytes, message: str) -> None:
    with pytest.raises(TxnRecordError, match=message):
        decode_value(data)


def test_damaged_keys_raise_a_record_error() -> None:
    with pytest.raises(TxnRecordError, match="unknown transaction log key version 1"):
        decode_key(b"\x00\x01\x00\x01a")
    with pytest.raises(TxnRecordError, match="ends early"):
        decode_key(b"\x00\x00\x00\x09abc")


names = st.text(min_size=1, max_size=40)
values = st.builds(
    TxnLogValue,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    timeout_ms=st.integers(1, 2**31 - 1),
    state=st.sampled_from([s for s in TxnState if s is not TxnState.EMPTY]),
    partitions=st.frozensets(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=20),
    last_update_ms=st.integers(-1, 2**62),
    start_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**63 - 1),
    next_producer_id=st.integers(-1, 2**63 - 1),
    client_transaction_version=st.integers(0, 2),
)


@given(values)
def test_version_1_round_trips_every_field(value: TxnLogValue) -> None:
    assert decode_value(encode_value(value, version=1)) == value


@given(values)
def test_version_0_round_trips_all_but_the_tagged_fields(value: TxnLogValue) -> None:
    read = decode_value(encode_value(value, version=0))
    assert read.producer_id == value.producer_id
    assert read.partitions == value.partitions
    assert (read.state, read.start_ms, read.last_update_ms) == (
        value.state,
        value.start_ms,
        value.last_update_ms,
    )


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_a_record_error(data: bytes) -> None:
    with contextlib.suppress(TxnRecordError):
        decode_value(data)
    with contextlib.suppress(TxnRecordError):
        decode_key(data)


@given(values, st.integers(0, 60))
def test_a_cut_value_never_reads_as_another(value: TxnLogValue, cut: int) -> None:
    data = encode_value(value, version=1)
    if cut >= len(data):
        return
    with pytest.raises(TxnRecordError):
        decode_value(data[: len(data) - 1 - cut])
