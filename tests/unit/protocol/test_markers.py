"""Transaction markers: Kafka's control batch layout, read back through the batch codec."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.protocol.markers import EndTxnMarker, MarkerError, encode_marker_batch, marker_of
from strom.protocol.record_codec import decode_batch
from strom.protocol.records import parse_batch_header


def test_a_commit_marker_is_one_control_record_of_the_transactions_producer() -> None:
    data = encode_marker_batch(
        producer_id=4000, producer_epoch=3, commit=True, coordinator_epoch=7, timestamp_ms=1234
    )
    header, [record] = decode_batch(data)
    assert header == parse_batch_header(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4000, 3, -1)
    assert record.key == struct.pack(">hh", 0, 1)
    assert record.value == struct.pack(">hi", 0, 7)
    assert marker_of(record.key, record.value) == EndTxnMarker(commit=True, coordinator_epoch=7)


def test_an_abort_marker() -> None:
    assert marker_of(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 2)) == EndTxnMarker(False, 2)


def test_newer_versions_are_read_as_version_0() -> None:
    key = struct.pack(">hh", 3, 1) + b"more"
    value = struct.pack(">hi", 1, 9) + b"more"
    assert marker_of(key, value) == EndTxnMarker(True, 9)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "type 2 is not a transaction"),
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1), "version -1"),
        (b"\x00", struct.pack(">hi", 0, 1), "without a readable key"),
        (struct.pack(">hh", 0, 1), None, "without a coordinator epoch"),
        (struct.pack(">hh", 0, 1), struct.pack(">hi", -2, 1), "value of version -2"),
    ],
)
def test_what_is_not_a_marker_is_refused(key: bytes, value: bytes | None, message: str) -> None:
    with pytest.raises(MarkerError, match=message):
        marker_of(key, value)


@given(st.binary(max_size=12) | st.none(), st.binary(max_size=12) | st.none())
def test_any_record_reads_as_a_marker_or_a_marker_error(
    key: bytes | None, value: bytes | None
) -> None:
    try:
        marker = marker_of(key, value)
    except MarkerError:
        return
    assert isinstance(marker, EndTxnMarker)
