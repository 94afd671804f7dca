"""replica_batches: a follower's split of the records its leader sent in a Fetch response."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.protocol.records import (
    BATCH_HEADER_SIZE,
    Compression,
    NewRecord,
    RecordsError,
    decode_batch,
    encode_batch,
    replica_batches,
)


def _batch(base_offset: int, count: int, *, epoch: int = 4, **kwargs: object) -> bytes:
    records = [NewRecord(key=b"k%d" % i, value=b"v" * (i + 1)) for i in range(count)]
    return encode_batch(
        records,
        base_timestamp_ms=1_000,
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        **kwargs,  # type: ignore[arg-type]
    )


def _fetched(first_offset: int = 500) -> tuple[bytes, list[bytes]]:
    batches = [
        _batch(first_offset, 3, epoch=4),
        _batch(first_offset + 3, 1, epoch=4, compression=Compression.LZ4),
        _batch(first_offset + 10, 2, epoch=7),  # a gap, as compaction leaves them
    ]
    return b"".join(batches), batches


def test_round_trip_at_nonzero_offsets() -> None:
    data, batches = _fetched()
    split = replica_batches(data)
    assert [bytes(view) for view, _ in split] == batches
    headers = [header for _, header in split]
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (500, 502, 4),
        (503, 503, 4),
        (510, 511, 7),
    ]
    assert decode_batch(split[1][0])[1][0].offset == 503
    assert all(isinstance(view, memoryview) for view, _ in split)


def test_accepts_any_buffer_and_nothing() -> None:
    data, batches = _fetched()
    for buffer in (bytearray(data), memoryview(data), memoryview(bytearray(data))[0:]):
        assert [bytes(view) for view, _ in replica_batches(buffer)] == batches
    assert replica_batches(b"") == []


def test_control_and_empty_batches_pass() -> None:
    marker = _batch(20, 1, is_control=True, is_transactional=True, producer_id=3)
    cleaned = encode_batch([], base_timestamp_ms=0, base_offset=21)  # compaction's leftover
    split = replica_batches(marker + cleaned)
    assert [h.base_offset for _, h in split] == [20, 21]


def test_trailing_partial_batch_is_dropped_at_every_cut() -> None:
    data, batches = _fetched()
    whole = len(batches[0]) + len(batches[1])
    for cut in range(whole, len(data)):
        split = replica_batches(data[:cut])
        assert [bytes(view) for view, _ in split] == batches[:2]
    assert len(replica_batches(data[: len(batches[0]) - 1])) == 0


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_flipped_byte_is_an_error(data: st.DataObject) -> None:
    fetched, batches = _fetched()
    position = data.draw(st.integers(0, len(fetched) - 1))
    damaged = bytearray(fetched)
    damaged[position] ^= 1 << data.draw(st.integers(0, 7))
    index, relative = 0, position
    while relative >= len(batches[index]):
        relative -= len(batches[index])
        index += 1
    if relative >= 16:  # magic, CRC and everything the CRC covers
        with pytest.raises(RecordsError):
            replica_batches(damaged)
    elif relative >= 12:  # partitionLeaderEpoch: the CRC does not cover it
        split = replica_batches(damaged)
        assert [bytes(view) for view, _ in split] == [
            bytes(damaged[position - relative : position - relative + len(batch)])
            if i == index
            else batch
            for i, batch in enumerate(batches)
        ]
    elif relative >= 8:  # batchLength: corrupt, or read as a partial batch and dropped
        try:
            assert len(replica_batches(damaged)) <= index
        except RecordsError as exc:
            assert exc.error_code == ErrorCode.corrupt_message
    else:  # baseOffset: not covered by the CRC either; only its order can be checked
        try:
            split = replica_batches(damaged)
        except RecordsError as exc:
            assert "out of order" in str(exc)
        else:
            assert len(split) == len(batches)


def test_flipped_crc_covered_byte_names_the_batch() -> None:
    data, batches = _fetched()
    damaged = bytearray(data)
    damaged[len(batches[0]) + BATCH_HEADER_SIZE] ^= 0x40
    with pytest.raises(RecordsError, match=f"CRC mismatch in batch at position {len(batches[0])}"):
        replica_batches(damaged)


def test_wrong_magic_is_refused() -> None:
    damaged = bytearray(_batch(0, 1))
    damaged[16] = 1
    with pytest.raises(RecordsError) as info:
        replica_batches(damaged)
    assert info.value.error_code == ErrorCode.unsupported_for_message_format


def test_impossible_batch_length_is_corrupt() -> None:
    damaged = bytearray(_batch(0, 1))
    struct.pack_into(">i", damaged, 8, 10)
    with pytest.raises(RecordsError, match="too small") as info:
        replica_batches(damaged)
    assert info.value.error_code == ErrorCode.corrupt_message


@pytest.mark.parametrize("second_base", [0, 2, -5])
def test_offsets_must_grow(second_base: int) -> None:
    first = _batch(0, 3)
    second = bytearray(_batch(10, 1))
    struct.pack_into(">q", second, 0, second_base)  # the CRC does not cover it
    with pytest.raises(RecordsError, match="out of order"):
        replica_batches(first + bytes(second))


def test_negative_first_offset_is_corrupt() -> None:
    batch = bytearray(_batch(0, 1))
    struct.pack_into(">q", batch, 0, -1)
    with pytest.raises(RecordsError, match="out of order"):
        replica_batches(batch)


def test_negative_last_offset_delta_is_corrupt() -> None:
    batch = bytearray(_batch(5, 1))
    struct.pack_into(">i", batch, 23, -2)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(RecordsError, match="out of order"):
        replica_batches(batch)
