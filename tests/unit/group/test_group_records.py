"""The byte layout of `__consumer_offsets` records, and group placement."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.group.consumer_protocol import encode_subscription, subscription_topics
from strom.group.placement import java_string_hash, partition_for
from strom.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

text = st.text(max_size=40)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)

members = st.builds(
    MemberRecord,
    text,
    st.none() | text,
    text,
    text,
    i32,
    i32,
    st.binary(max_size=64),
    st.binary(max_size=64),
)


@given(text, text, i32, i64, i32, text, i64)
def test_offset_records_round_trip(
    group: str, topic: str, partition: int, offset: int, epoch: int, meta: str, ts: int
) -> None:
    key = OffsetCommitKey(group, topic, partition)
    value = OffsetCommitValue(offset, epoch, meta, ts)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


@given(text, text, i32, st.none() | text, st.none() | text, i64, st.lists(members, max_size=4))
def test_group_records_round_trip(
    group: str,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    ts: int,
    member_list: list[MemberRecord],
) -> None:
    key = GroupMetadataKey(group)
    value = GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(member_list))
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


def test_the_layout_is_kafkas() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = encode_value(OffsetCommitValue(5, -1, "", 7))
    assert value == (b"\x00\x03" + (5).to_bytes(8, "big") + b"\xff\xff\xff\xff" + b"\x00\x00") + (
        7
    ).to_bytes(8, "big")
    assert encode_key(GroupMetadataKey("g")) == b"\x00\x02\x00\x01g"


def test_older_offset_value_versions_are_read() -> None:
    key = OffsetCommitKey("g", "t", 0)
    v1 = b"\x00\x01" + (9).to_bytes(8, "big") + b"\x00\x02hi" + (5).to_bytes(8, "big") * 2
    assert decode_value(key, v1) == OffsetCommitValue(9, -1, "hi", 5, 5)


@given(st.binary(max_size=80))
def test_garbage_raises_only_record_format_error(data: bytes) -> None:
    try:
        key = decode_key(data)
        decode_value(key, data)
    except RecordFormatError:
        pass


def test_unknown_versions_are_refused() -> None:
    with pytest.raises(RecordFormatError, match="key version 9"):
        decode_key(b"\x00\x09")


def test_java_string_hash_and_partition() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    # This string hashes to Integer.MIN_VALUE, whose abs Kafka maps to 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # two UTF-16 units


@given(st.lists(st.text(min_size=1, max_size=20), max_size=5), st.binary(max_size=10))
def test_subscription_topics(topics: list[str], user_data: bytes) -> None:
    assert subscription_topics(encode_subscription(topics, user_data)) == frozenset(topics)


def test_subscription_garbage_is_none() -> None:
    assert subscription_topics(b"") is None
    assert subscription_topics(b"\x00\x00\x7f\xff\xff\xff") is None
