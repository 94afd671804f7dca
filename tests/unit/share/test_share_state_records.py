"""The byte layout of `__share_group_state` records (Kafka 4.x's ShareSnapshot and
ShareUpdate), and replaying them."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.group.placement import partition_for
from strom.share.placement import share_coordinator_key, share_state_partition
from strom.share.records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateFormatError,
    ShareUpdateKey,
    ShareUpdateValue,
    StateBatch,
    decode_share_key,
    decode_share_record,
    decode_share_value,
    encode_share_key,
    encode_share_record,
    encode_share_value,
)
from strom.share.replay import DurableShareState, ShareReplayError, state_batches
from strom.share.values import RecordState

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_the_key_opens_with_the_record_type() -> None:
    snapshot = encode_share_key(ShareSnapshotKey("g1", TOPIC_ID, 7))
    update = encode_share_key(ShareUpdateKey("g1", TOPIC_ID, 7))
    body = b"\x00\x02g1" + TOPIC_ID.bytes + b"\x00\x00\x00\x07"
    assert snapshot == b"\x00\x00" + body
    assert update == b"\x00\x01" + body
    assert decode_share_key(snapshot) == ShareSnapshotKey("g1", TOPIC_ID, 7)
    assert decode_share_key(update) == ShareUpdateKey("g1", TOPIC_ID, 7)


def test_an_update_value_byte_by_byte() -> None:
    value = ShareUpdateValue(
        snapshot_epoch=3,
        leader_epoch=9,
        start_offset=-1,
        state_batches=(StateBatch(10, 12, 2, 1),),
    )
    data = encode_share_value(value)
    assert data == (
        b"\x00\x00"  # value version 0
        + b"\x00\x00\x00\x03"  # snapshot epoch
        + b"\x00\x00\x00\x09"  # leader epoch
        + b"\xff" * 8  # start offset -1: unchanged
        + b"\x02"  # compact array: one batch
        + (10).to_bytes(8, "big")
        + (12).to_bytes(8, "big")
        + b"\x02"  # ACKNOWLEDGED
        + b"\x00\x01"  # delivery count
        + b"\x00"  # the batch's tagged fields
        + b"\x00"  # the value's tagged fields: DeliveryCompleteCount left at -1
    )
    assert decode_share_value(ShareUpdateKey("g", TOPIC_ID, 0), data) == value


def test_delivery_complete_count_is_tagged_field_zero() -> None:
    value = ShareUpdateValue(0, 0, 5, (), delivery_complete_count=3)
    data = encode_share_value(value)
    assert data.endswith(b"\x01" + b"\x00\x04" + b"\x00\x00\x00\x03")
    assert decode_share_value(ShareUpdateKey("g", TOPIC_ID, 0), data) == value


def test_a_snapshot_value_round_trips() -> None:
    value = ShareSnapshotValue(
        snapshot_epoch=1,
        state_epoch=2,
        leader_epoch=3,
        start_offset=100,
        create_timestamp_ms=1_700_000_000_000,
        write_timestamp_ms=1_700_000_000_500,
        state_batches=(StateBatch(100, 100, 0, 2), StateBatch(101, 105, 4, 5)),
    )
    data = encode_share_value(value)
    assert data[:2] == b"\x00\x00"
    assert decode_share_value(ShareSnapshotKey("g", TOPIC_ID, 0), data) == value


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x02\x00\x01g" + bytes(16) + bytes(4),  # record type 2
        b"\x00\x00\x00\x01g" + bytes(15),  # short
        b"\x00\x00\x00\x01g" + bytes(20) + b"\x00",  # trailing byte
    ],
)
def test_a_damaged_key_is_refused(data: bytes) -> None:
    with pytest.raises(ShareStateFormatError):
        decode_share_key(data)


def test_a_damaged_value_is_refused() -> None:
    key = ShareUpdateKey("g", TOPIC_ID, 0)
    good = encode_share_value(ShareUpdateValue(0, 0, 1, (StateBatch(1, 1, 2, 1),)))
    for bad in (b"\x00\x01" + good[2:], good[:-1], good + b"\x00", good[:22]):
        with pytest.raises(ShareStateFormatError):
            decode_share_value(key, bad)


i16 = st.integers(0, 2**15 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
batches = st.lists(
    st.builds(StateBatch, i64, i64, st.sampled_from([0, 2, 4]), i16), max_size=5
).map(tuple)
counts = st.just(-1) | st.integers(0, 2**31 - 1)


@given(
    st.builds(ShareSnapshotValue, i32, i32, i32, i64, i64, i64, batches, counts)
    | st.builds(ShareUpdateValue, i32, i32, i64, batches, counts),
    st.text(max_size=30),
    st.uuids(),
    st.integers(0, 2**31 - 1),
)
def test_any_value_and_key_round_trip(
    value: ShareSnapshotValue | ShareUpdateValue, group: str, topic_id: uuid.UUID, partition: int
) -> None:
    key = (
        ShareSnapshotKey(group, topic_id, partition)
        if isinstance(value, ShareSnapshotValue)
        else ShareUpdateKey(group, topic_id, partition)
    )
    decoded_key = decode_share_key(encode_share_key(key))
    assert decoded_key == key
    assert decode_share_value(decoded_key, encode_share_value(value)) == value


def test_replay_applies_a_snapshot_then_updates_in_order() -> None:
    snapshot = ShareSnapshotValue(0, 1, 0, 10, 0, 0, (StateBatch(11, 12, 2, 1),))
    first = ShareUpdateValue(0, 0, -1, (StateBatch(10, 10, 0, 1), StateBatch(13, 13, 4, 3)))
    second = ShareUpdateValue(0, 0, 12, (StateBatch(14, 14, 2, 1),))
    state = DurableShareState.from_records([snapshot, first, second])
    assert state.view() == (
        12,
        (
            (12, RecordState.ACKNOWLEDGED, 1),
            (13, RecordState.ARCHIVED, 3),
            (14, RecordState.ACKNOWLEDGED, 1),
        ),
    )
    assert state.updates_since_snapshot == 2
    later = ShareSnapshotValue(1, 1, 0, 20, 0, 0, ())
    assert DurableShareState.from_records([snapshot, first, later]).view() == (20, ())


def test_replay_needs_a_snapshot_and_durable_states() -> None:
    with pytest.raises(ShareReplayError):
        DurableShareState.from_records([ShareUpdateValue(0, 0, 1, ())])
    acquired = ShareSnapshotValue(0, 0, 0, 0, 0, 0, (StateBatch(0, 0, 1, 1),))
    with pytest.raises(ShareReplayError):
        DurableShareState.from_records([acquired])


def test_archiving_is_read_back_as_archiving() -> None:
    snapshot = ShareSnapshotValue(0, 0, 0, 0, 0, 0, (StateBatch(1, 2, 3, 5),))
    view = DurableShareState.from_records([snapshot]).view()
    assert view == (0, ((1, RecordState.ARCHIVING, 5), (2, RecordState.ARCHIVING, 5)))


def test_state_batches_coalesce_runs() -> None:
    states = {
        5: (RecordState.ACKNOWLEDGED, 1),
        6: (RecordState.ACKNOWLEDGED, 1),
        7: (RecordState.ACKNOWLEDGED, 2),
        9: (RecordState.ACKNOWLEDGED, 2),
    }
    assert state_batches(states) == (
        StateBatch(5, 6, 2, 1),
        StateBatch(7, 7, 2, 2),
        StateBatch(9, 9, 2, 2),
    )


def test_a_decisions_record_is_keyed_by_its_kind() -> None:
    update = ShareUpdateValue(0, 0, -1, ())
    key, value = encode_share_record("g", TOPIC_ID, 2, update)
    assert decode_share_record(key, value) == (ShareUpdateKey("g", TOPIC_ID, 2), update)
    snapshot = ShareSnapshotValue(0, 0, 0, 0, 0, 0, ())
    key, _ = encode_share_record("g", TOPIC_ID, 2, snapshot)
    assert decode_share_record(key, None) == (ShareSnapshotKey("g", TOPIC_ID, 2), None)


def test_the_state_lives_where_kafka_puts_it() -> None:
    key = share_coordinator_key("workers", uuid.UUID(int=1), 3)
    assert key == "workers:AAAAAAAAAAAAAAAAAAAAAQ:3"  # Kafka's Uuid text: URL-safe base64
    assert share_state_partition("workers", uuid.UUID(int=1), 3, 50) == partition_for(key, 50)
