"""Share group records in `__consumer_offsets`: Kafka's key versions and value layouts,
byte-exact round trips, tombstones and replay."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.group.share.records import (
    ShareCurrentAssignmentKey,
    ShareCurrentAssignmentValue,
    ShareGroupEpochKey,
    ShareGroupEpochValue,
    ShareKey,
    ShareMemberKey,
    ShareMemberValue,
    ShareRecordError,
    ShareStatePartitionsKey,
    ShareStatePartitionsValue,
    ShareStateTopic,
    ShareTargetEpochKey,
    ShareTargetEpochValue,
    ShareTargetKey,
    ShareTargetValue,
    ShareValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
    is_share_key,
)
from strom.group.share.state import ShareGroupState, replay_share

TID = uuid.UUID("00000000-0000-0000-0000-0000000000ab")


def test_key_layouts() -> None:
    assert encode_share_key(ShareMemberKey("g", "m")) == b"\x00\x0a\x00\x01g\x00\x01m"
    assert encode_share_key(ShareGroupEpochKey("g")) == b"\x00\x0b\x00\x01g"
    assert encode_share_key(ShareTargetEpochKey("g")) == b"\x00\x0c\x00\x01g"
    assert encode_share_key(ShareTargetKey("g", "m")) == b"\x00\x0d\x00\x01g\x00\x01m"
    assert encode_share_key(ShareCurrentAssignmentKey("g", "m")) == b"\x00\x0e\x00\x01g\x00\x01m"
    assert encode_share_key(ShareStatePartitionsKey("g")) == b"\x00\x0f\x00\x01g"
    assert is_share_key(b"\x00\x0a\x00\x01g") and not is_share_key(b"\x00\x03\x00\x01g")
    with pytest.raises(ShareRecordError):
        decode_share_key(b"\x00\x09\x00\x01g")


def test_value_layouts() -> None:
    member = ShareMemberValue(None, "c", "/h", ("t",))
    assert (
        encode_share_value(member)
        == b"\x00\x00" + b"\x00" + b"\x02c" + b"\x03/h" + (b"\x02\x02t") + b"\x00"
    )
    epoch = ShareGroupEpochValue(7, -2)
    assert encode_share_value(epoch) == (
        b"\x00\x00\x00\x00\x00\x07" + b"\xff" * 7 + b"\xfe" + b"\x00"
    )
    assert encode_share_value(ShareTargetEpochValue(7)) == b"\x00\x00\x00\x00\x00\x07\x00"
    stamped = encode_share_value(ShareTargetEpochValue(7, 1))
    assert stamped == b"\x00\x00\x00\x00\x00\x07" + b"\x01\x00\x08" + b"\x00" * 7 + b"\x01"
    target = ShareTargetValue({TID: frozenset({1, 0})})
    assert encode_share_value(target) == (
        b"\x00\x00\x02" + TID.bytes + b"\x03" + b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00"
    )
    current = ShareCurrentAssignmentValue(3, 2, 0, {})
    assert encode_share_value(current) == (
        b"\x00\x00" + b"\x00\x00\x00\x03" + b"\x00\x00\x00\x02" + b"\x00" + b"\x01" + b"\x00"
    )
    state = ShareStatePartitionsValue(
        initialized=(ShareStateTopic(TID, "t", frozenset({0})),),
        deleting=(ShareStateTopic(TID, "t", None),),
    )
    assert encode_share_value(state) == (
        b"\x00\x00\x01"
        + b"\x02" + TID.bytes + b"\x02t" + b"\x02\x00\x00\x00\x00" + b"\x00"
        + b"\x02" + TID.bytes + b"\x02t" + b"\x00"
        + b"\x00"
    )  # fmt: skip


def test_unknown_tags_are_skipped_and_unknown_versions_refused() -> None:
    key = ShareGroupEpochKey("g")
    raw = b"\x00\x00\x00\x00\x00\x07" + b"\x00" * 8 + b"\x01\x05\x02zz"
    assert decode_share_value(key, raw) == ShareGroupEpochValue(7, 0)
    with pytest.raises(ShareRecordError):
        decode_share_value(key, b"\x00\x01" + raw[2:])
    with pytest.raises(ShareRecordError):
        decode_share_value(key, raw[:5])


names = st.text(min_size=0, max_size=8)
ids = st.uuids()
parts = st.frozensets(st.integers(0, 2**31 - 1), max_size=5)
assignments = st.dictionaries(ids, parts, max_size=3)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
state_topics = st.tuples(ids, names, parts).map(lambda x: ShareStateTopic(*x))
deleting_topics = st.tuples(ids, names).map(lambda x: ShareStateTopic(x[0], x[1], None))
records: st.SearchStrategy[tuple[ShareKey, ShareValue]] = st.one_of(
    st.tuples(
        st.builds(ShareMemberKey, names, names),
        st.builds(ShareMemberValue, st.none() | names, names, names, st.tuples(names, names)),
    ),
    st.tuples(st.builds(ShareGroupEpochKey, names), st.builds(ShareGroupEpochValue, i32, i64)),
    st.tuples(st.builds(ShareTargetEpochKey, names), st.builds(ShareTargetEpochValue, i32, i64)),
    st.tuples(st.builds(ShareTargetKey, names, names), st.builds(ShareTargetValue, assignments)),
    st.tuples(
        st.builds(ShareCurrentAssignmentKey, names, names),
        st.builds(ShareCurrentAssignmentValue, i32, i32, st.integers(-128, 127), assignments),
    ),
    st.tuples(
        st.builds(ShareStatePartitionsKey, names),
        st.builds(
            ShareStatePartitionsValue,
            st.lists(state_topics, max_size=2).map(tuple),
            st.lists(state_topics, max_size=2).map(tuple),
            st.lists(deleting_topics, max_size=2).map(tuple),
        ),
    ),
)


@given(records)
def test_round_trips_are_byte_exact(record: tuple[ShareKey, ShareValue]) -> None:
    key, value = record
    key_bytes = encode_share_key(key)
    assert decode_share_key(key_bytes) == key
    assert encode_share_key(decode_share_key(key_bytes)) == key_bytes
    value_bytes = encode_share_value(value)
    decoded = decode_share_value(key, value_bytes)
    assert decoded == value
    assert encode_share_value(decoded) == value_bytes


def test_replay_builds_and_tombstones_remove() -> None:
    groups = {}
    replay_share(groups, ShareGroupEpochKey("g"), ShareGroupEpochValue(2, 5))
    replay_share(groups, ShareMemberKey("g", "m"), ShareMemberValue("r", "c", "h", ("t",)))
    replay_share(
        groups,
        ShareCurrentAssignmentKey("g", "m"),
        ShareCurrentAssignmentValue(2, 1, 0, {TID: frozenset({0})}),
    )
    replay_share(groups, ShareTargetKey("g", "m"), ShareTargetValue({TID: frozenset({0})}))
    replay_share(groups, ShareTargetEpochKey("g"), ShareTargetEpochValue(2))
    group = groups["g"]
    assert group.state == ShareGroupState.STABLE
    assert group.members["m"].member_epoch == 2 and group.members["m"].rack_id == "r"
    assert (group.group_epoch, group.metadata_hash, group.assignment_epoch) == (2, 5, 2)
    replay_share(groups, ShareCurrentAssignmentKey("g", "m"), None)
    replay_share(groups, ShareTargetKey("g", "m"), None)
    replay_share(groups, ShareMemberKey("g", "m"), None)
    assert group.state == ShareGroupState.EMPTY and not group.target
    replay_share(groups, ShareGroupEpochKey("g"), None)
    assert groups == {}
    replay_share(groups, ShareMemberKey("g", "m"), None)  # a tombstone of nothing
    assert groups == {}
