"""The records a share-partition reads from its log's batches: offsets and timestamps,
control batches left out, at most a limit, and the header-only reading of gapless
batches agreeing with decoding them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.protocol.record_codec import NewRecord, encode_batch
from strom.share.log_batches import fetched_records
from strom.share.values import FetchedRecord


def _batch(base_offset: int, stamps: list[int], *, control: bool = False) -> bytes:
    return encode_batch(
        [NewRecord(b"k", b"v", timestamp_ms=t) for t in stamps],
        base_timestamp_ms=min(stamps),
        base_offset=base_offset,
        is_control=control,
    )


_sizes = st.lists(st.integers(1, 20), min_size=1, max_size=8)


@given(_sizes, st.integers(0, 10_000))
def test_the_header_only_path_finds_the_decoded_offsets(sizes: list[int], start: int) -> None:
    data, offset, stamps = b"", start, []
    for size in sizes:
        batch_stamps = [1_000 + i for i in range(size)]
        data += _batch(offset, batch_stamps)
        stamps += batch_stamps
        offset += size
    decoded = fetched_records(data)
    fast = fetched_records(data, timestamps=False)
    assert [r.offset for r in fast] == [r.offset for r in decoded] == list(range(start, offset))
    assert [r.timestamp_ms for r in decoded] == stamps


def test_control_batches_hold_no_record_and_the_limit_holds() -> None:
    data = _batch(0, [5, 6, 7]) + _batch(3, [8], control=True) + _batch(4, [9, 10])
    assert fetched_records(data) == [
        FetchedRecord(0, 5),
        FetchedRecord(1, 6),
        FetchedRecord(2, 7),
        FetchedRecord(4, 9),
        FetchedRecord(5, 10),
    ]
    assert [r.offset for r in fetched_records(data, timestamps=False, limit=4)] == [0, 1, 2, 4]
    assert fetched_records(data, limit=0) == []


def test_a_partial_last_batch_is_left_out() -> None:
    whole = _batch(0, [1, 2])
    data = whole + _batch(2, [3, 4])[:-5]
    assert [r.offset for r in fetched_records(data, timestamps=False)] == [0, 1]


@given(_sizes, st.integers(0, 200), st.booleans())
def test_records_below_the_fetch_offset_are_left_out_before_the_limit(
    sizes: list[int], skip: int, timestamps: bool
) -> None:
    """A read starts at the batch holding the fetch offset, which may begin below it:
    those records must not use up the limit (else a consumer stalls on a big batch)."""
    data, offset = b"", 0
    for size in sizes:
        data += _batch(offset, [7] * size)
        offset += size
    start = min(skip, offset)
    got = fetched_records(data, timestamps=timestamps, limit=3, from_offset=start)
    assert [r.offset for r in got] == list(range(start, min(start + 3, offset)))
