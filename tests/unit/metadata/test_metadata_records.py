"""Metadata records and entries: every record round-trips; malformed bytes are refused."""

from __future__ import annotations

import uuid

import pytest

from strom.metadata import records
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import (
    AccessControlEntryRecord,
    BrokerEndpoint,
    ClientQuotaRecord,
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    MetadataDecodeError,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    SecurityProtocol,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)

TOPIC_ID = uuid.UUID(int=7)

EVERY_RECORD = [
    ClusterRecord("abc", "strom"),
    RegisterBrokerRecord(1, TOPIC_ID, "h", 1, "r"),
    RegisterBrokerRecord(2, TOPIC_ID, "h", 2, None, fenced=False, epoch=12),
    RegisterBrokerRecord(
        3,
        TOPIC_ID,
        "h",
        3,
        None,
        endpoints=(
            BrokerEndpoint("PLAINTEXT", "h", 3),
            BrokerEndpoint("SSL", "::1", 4, SecurityProtocol.SSL),
        ),
    ),
    FenceBrokerRecord(1, 5),
    UnfenceBrokerRecord(1, 5),
    UnregisterBrokerRecord(1, 5),
    TopicRecord("t", TOPIC_ID),
    PartitionRecord(TOPIC_ID, 0, (1, 2), (1,), 1, 3, 4),
    PartitionChangeRecord(TOPIC_ID, 0, -1, (2,), 4, 5),
    PartitionChangeRecord(TOPIC_ID, 0, 2, (2, 3), 4, 5, replicas=(2, 3)),
    RemoveTopicRecord(TOPIC_ID),
    ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", None),
    ConfigRecord(ConfigResourceType.BROKER, "", "log.retention.ms", "1000"),
    ProducerIdsRecord(1, 5, 2000),
    UserScramCredentialRecord("alice", 1, b"salt", b"\x00stored", b"server\xff", 4096),
    RemoveUserScramCredentialRecord("alice", 2),
    AccessControlEntryRecord(TOPIC_ID, 2, "orders", 3, "User:alice", "*", 3, 3),
    AccessControlEntryRecord(TOPIC_ID, 5, "tx-é", 4, "User:*", "10.0.0.0/8", 12, 2),
    RemoveAccessControlEntryRecord(TOPIC_ID),
    ClientQuotaRecord(QuotaEntity.user_client("alice", None), "producer_byte_rate", 1048576.0),
    ClientQuotaRecord(QuotaEntity.ip("10.0.0.1"), "connection_creation_rate", None),
    ClientQuotaRecord(QuotaEntity.user(None), "request_percentage", 12.5),
]


@pytest.mark.parametrize("record", EVERY_RECORD, ids=lambda r: type(r).__name__)
def test_every_record_round_trips(record: records.MetadataRecord) -> None:
    assert records.decode(records.encode(record)) == record


def test_an_entry_round_trips_in_order() -> None:
    assert records.decode_entry(records.encode_entry(EVERY_RECORD)) == EVERY_RECORD
    assert records.decode_entry(records.encode_entry([])) == []


def test_registrations_default_to_fenced_but_old_ones_decode_as_unfenced() -> None:
    assert RegisterBrokerRecord(1, TOPIC_ID, "h", 1, None).fenced
    old = (
        b'{"broker_id":1,"host":"h","incarnation_id":"%s","port":1,"rack":null,'
        b'"type":"RegisterBrokerRecord"}' % str(TOPIC_ID).encode()
    )
    decoded = records.decode(old)
    assert decoded == RegisterBrokerRecord(1, TOPIC_ID, "h", 1, None, fenced=False, epoch=None)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"{", "not JSON"),
        (b"{}", "a JSON array"),
        (b"[1]", "expected a JSON object"),
        (b'[{"type":"Nope"}]', "unknown record type 'Nope'"),
        (b'[{"type":"FenceBrokerRecord","broker_id":1}]', "lacks field 'epoch'"),
        (b'[{"type":"FenceBrokerRecord","broker_id":"1","epoch":2}]', "expected an integer"),
        (b'[{"type":"FenceBrokerRecord","broker_id":true,"epoch":2}]', "expected an integer"),
        (
            b'[{"type":"FenceBrokerRecord","broker_id":1,"epoch":2,"extra":0}]',
            "unknown field(s) ['extra']",
        ),
        (b'[{"type":"TopicRecord","name":"t","topic_id":"not-a-uuid"}]', "TopicRecord.topic_id"),
        (b'[{"type":"RemoveTopicRecord","topic_id":5}]', "expected a string"),
        (
            b'[{"type":"ConfigRecord","resource_type":3,"resource_name":"",'
            b'"name":"a","value":null}]',
            "ConfigRecord.resource_type",
        ),
        (
            b'[{"type":"PartitionChangeRecord","topic_id":"%s","partition":0,"leader":1,'
            b'"isr":[1,"2"],"leader_epoch":0,"partition_epoch":0}]' % str(TOPIC_ID).encode(),
            "PartitionChangeRecord.isr",
        ),
        (
            b'[{"type":"ClusterRecord","cluster_id":"a","cluster_name":1}]',
            "expected a string",
        ),
        (
            b'[{"type":"RegisterBrokerRecord","broker_id":1,"incarnation_id":"%s","host":"h",'
            b'"port":1,"rack":null,"endpoints":[{"name":"SSL","host":"h","port":2,'
            b'"security_protocol":9}]}]' % str(TOPIC_ID).encode(),
            "unknown security protocol 9",
        ),
        (
            b'[{"type":"RegisterBrokerRecord","broker_id":1,"incarnation_id":"%s","host":"h",'
            b'"port":1,"rack":null,"endpoints":[{"name":"SSL","host":"h"}]}]'
            % str(TOPIC_ID).encode(),
            "RegisterBrokerRecord.endpoints",
        ),
        (
            b'[{"type":"UserScramCredentialRecord","name":"a","mechanism":1,"salt":"c2Fsd!==",'
            b'"stored_key":"","server_key":"","iterations":4096}]',
            "UserScramCredentialRecord.salt: expected base64 text",
        ),
        (
            b'[{"type":"UserScramCredentialRecord","name":"a","mechanism":1,"salt":1,'
            b'"stored_key":"","server_key":"","iterations":4096}]',
            "expected a string",
        ),
        (
            b'[{"type":"AccessControlEntryRecord","id":"x","resource_type":2,'
            b'"resource_name":"t","pattern_type":3,"principal":"User:a","host":"*",'
            b'"operation":3,"permission_type":3}]',
            "AccessControlEntryRecord.id",
        ),
        (
            b'[{"type":"AccessControlEntryRecord","id":"%s","resource_type":2,'
            b'"resource_name":"t","pattern_type":3,"principal":"User:a","host":"*",'
            b'"operation":"Read","permission_type":3}]' % str(TOPIC_ID).encode(),
            "AccessControlEntryRecord.operation: expected an integer",
        ),
        (
            b'[{"type":"AccessControlEntryRecord","id":"%s","resource_type":2,'
            b'"resource_name":"t","pattern_type":3,"principal":"User:a","operation":3,'
            b'"permission_type":3}]' % str(TOPIC_ID).encode(),
            "AccessControlEntryRecord lacks field 'host'",
        ),
        (b'[{"type":"RemoveAccessControlEntryRecord"}]', "lacks field 'id'"),
        (
            b'[{"type":"ClientQuotaRecord","entity":[["user","a"],["user","b"]],"key":"k",'
            b'"value":1.0}]',
            "expected distinct [type, name] pairs",
        ),
        (
            b'[{"type":"ClientQuotaRecord","entity":[["user",null]],"key":"k","value":true}]',
            "ClientQuotaRecord.value: expected a finite number",
        ),
        (
            b'[{"type":"ClientQuotaRecord","entity":[["user",null]],"key":"k","value":NaN}]',
            "ClientQuotaRecord.value: expected a finite number",
        ),
    ],
)
def test_malformed_entries_are_refused(data: bytes, problem: str) -> None:
    with pytest.raises(MetadataDecodeError) as info:
        records.decode_entry(data)
    assert problem in str(info.value)


def test_a_single_malformed_record_is_refused() -> None:
    with pytest.raises(MetadataDecodeError, match="expected a JSON object"):
        records.decode(b"[]")


def test_a_scram_record_keeps_its_keys_out_of_its_repr() -> None:
    record = UserScramCredentialRecord("alice", 1, b"salty", b"stored!", b"server!", 4096)
    text = repr(record)
    assert "alice" in text and "4096" in text
    assert "salty" not in text and "stored!" not in text and "server!" not in text


def test_an_acl_record_is_written_with_kafkas_fields() -> None:
    record = AccessControlEntryRecord(TOPIC_ID, 2, "orders", 3, "User:alice", "*", 3, 3)
    assert records.record_to_json(record) == {
        "type": "AccessControlEntryRecord",
        "id": str(TOPIC_ID),
        "resource_type": 2,
        "resource_name": "orders",
        "pattern_type": 3,
        "principal": "User:alice",
        "host": "*",
        "operation": 3,
        "permission_type": 3,
    }
    assert records.record_to_json(RemoveAccessControlEntryRecord(TOPIC_ID)) == {
        "type": "RemoveAccessControlEntryRecord",
        "id": str(TOPIC_ID),
    }


def test_a_client_quota_record_is_written_with_its_entity_parts_sorted() -> None:
    record = ClientQuotaRecord(QuotaEntity.user_client("alice", None), "consumer_byte_rate", 2.0)
    assert records.record_to_json(record) == {
        "type": "ClientQuotaRecord",
        "entity": [["client-id", None], ["user", "alice"]],
        "key": "consumer_byte_rate",
        "value": 2.0,
    }
