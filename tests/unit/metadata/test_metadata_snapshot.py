"""Snapshots rebuild the image exactly: brokers' epochs and fencing, partitions, configs."""

from __future__ import annotations

import json
import uuid

import pytest
from cluster_harness import cluster, create_topic, fence
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata.acl_records import acl_record
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    MetadataDecodeError,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from strom.metadata.snapshot import decode_snapshot, encode_snapshot, snapshot_records
from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.security.operations import AclOperation, AclResourceType


def test_a_cluster_snapshot_round_trips_with_epochs_and_fencing() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3), 1: (3, 2, 1)})
    image = fence(image, 2)
    restored = decode_snapshot(encode_snapshot(image))
    assert restored == image
    assert restored.brokers[2].fenced and restored.brokers[2].epoch == image.brokers[2].epoch
    assert restored.offset == image.offset


def test_the_empty_image_round_trips() -> None:
    assert decode_snapshot(encode_snapshot(MetadataImage.empty())) == MetadataImage.empty()


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (b"nope", "not JSON"),
        (b"[]", "not a strom metadata snapshot"),
        (
            b'{"format":"strom-metadata-snapshot","version":2,"offset":1,"records":[]}',
            "version 2 is not supported",
        ),
        (b'{"format":"strom-metadata-snapshot","version":1,"records":[]}', "integer offset"),
        (
            b'{"format":"strom-metadata-snapshot","version":1,"offset":1,"records":[{}]}',
            "unknown record type",
        ),
    ],
)
def test_malformed_snapshots_are_refused(document: bytes, problem: str) -> None:
    with pytest.raises(MetadataDecodeError, match=problem):
        decode_snapshot(document)


def test_a_snapshot_names_its_format_version_and_offset() -> None:
    document = json.loads(encode_snapshot(cluster(1)))
    assert (document["format"], document["version"], document["offset"]) == (
        "strom-metadata-snapshot",
        1,
        1,
    )


# ---------------------------------------------------------------- random record sequences

_IDS = st.sampled_from([uuid.UUID(int=n) for n in range(1, 4)])
_BROKERS = st.integers(0, 3)
_EPOCHS = st.integers(-1, 12)
_REPLICAS = st.lists(_BROKERS, min_size=1, max_size=3, unique=True).map(tuple)
_NAMES = st.sampled_from(["a", "b", "c"])
_RECORDS: st.SearchStrategy[MetadataRecord] = st.one_of(
    st.builds(ClusterRecord, st.sampled_from(["id1", "id2"]), st.sampled_from(["x", "y"])),
    st.builds(
        RegisterBrokerRecord,
        _BROKERS,
        _IDS,
        st.just("h"),
        st.integers(0, 9),
        st.one_of(st.none(), st.just("r")),
        st.booleans(),
    ),
    st.builds(FenceBrokerRecord, _BROKERS, _EPOCHS),
    st.builds(UnfenceBrokerRecord, _BROKERS, _EPOCHS),
    st.builds(UnregisterBrokerRecord, _BROKERS, _EPOCHS),
    st.builds(TopicRecord, _NAMES, _IDS),
    st.builds(
        PartitionRecord, _IDS, st.integers(0, 2), _REPLICAS, _REPLICAS, _BROKERS, _EPOCHS, _EPOCHS
    ),
    st.builds(
        PartitionChangeRecord,
        _IDS,
        st.integers(0, 2),
        _BROKERS,
        _REPLICAS,
        _EPOCHS,
        _EPOCHS,
        st.one_of(st.none(), _REPLICAS),
    ),
    st.builds(RemoveTopicRecord, _IDS),
    st.builds(
        ConfigRecord,
        st.sampled_from(ConfigResourceType),
        st.sampled_from(["", "1", "a"]),
        st.sampled_from(["k1", "k2"]),
        st.one_of(st.none(), st.sampled_from(["v1", "v2"])),
    ),
    st.builds(ProducerIdsRecord, _BROKERS, _EPOCHS, st.integers(0, 10_000)),
    st.builds(
        UserScramCredentialRecord,
        _NAMES,
        st.sampled_from([1, 2]),
        st.binary(max_size=4),
        st.binary(max_size=4),
        st.binary(max_size=4),
        st.integers(4096, 16384),
    ),
    st.builds(RemoveUserScramCredentialRecord, _NAMES, st.sampled_from([1, 2])),
    st.builds(
        AccessControlEntryRecord,
        _IDS,
        st.sampled_from([2, 3, 99]),
        _NAMES,
        st.sampled_from([3, 4]),
        st.sampled_from(["User:a", "User:*"]),
        st.just("*"),
        st.sampled_from([3, 4]),
        st.sampled_from([2, 3]),
    ),
    st.builds(RemoveAccessControlEntryRecord, _IDS),
    st.builds(
        ClientQuotaRecord,
        st.sampled_from(
            [
                QuotaEntity.user("a"),
                QuotaEntity.user(None),
                QuotaEntity.user_client("a", None),
                QuotaEntity.client("c"),
                QuotaEntity.ip(None),
            ]
        ),
        st.sampled_from(["producer_byte_rate", "request_percentage"]),
        st.one_of(st.none(), st.floats(0.5, 1e9)),
    ),
)


@settings(max_examples=150)
@given(st.lists(st.lists(_RECORDS, max_size=5), max_size=12))
def test_any_replayed_image_survives_a_snapshot(entries: list[list[MetadataRecord]]) -> None:
    image = MetadataImage.empty()
    for entry in entries:
        image = image.replay(entry)
    restored = decode_snapshot(encode_snapshot(image))
    assert restored == image
    assert set(restored.acl_index) == set(image.acl_index) == set(image.acls.values())
    assert restored.acl_duplicates == image.acl_duplicates


def test_acls_survive_a_snapshot_with_their_ids_duplicates_included() -> None:
    read = AclBinding(
        AclResourceType.TOPIC,
        "orders",
        PatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    prefixed = AclBinding(
        AclResourceType.GROUP,
        "app-",
        PatternType.PREFIXED,
        "User:*",
        "10.0.0.0/8",
        AclOperation.ALL,
        AclPermissionType.DENY,
    )
    image = MetadataImage.empty().replay(
        [
            acl_record(read, uuid.UUID(int=9)),
            acl_record(prefixed),
            acl_record(read, uuid.UUID(int=3)),  # a duplicate no controller writes
        ]
    )
    # By id: the small test ids first, then the derived (version-5) one.
    assert [r for r in snapshot_records(image) if isinstance(r, AccessControlEntryRecord)] == [
        acl_record(read, uuid.UUID(int=3)),
        acl_record(read, uuid.UUID(int=9)),
        acl_record(prefixed),
    ]
    restored = decode_snapshot(encode_snapshot(image))
    assert restored == image
    assert restored.acls == {
        uuid.UUID(int=9): read,
        uuid.UUID(int=3): read,
        acl_record(prefixed).id: prefixed,
    }
    assert sorted(restored.acl_index) == sorted([read, prefixed])
    assert restored.acl_duplicates == {read: 1}
