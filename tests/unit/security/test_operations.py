"""Authorized-operations fields: Kafka's codes, supported sets and bit layout."""

from __future__ import annotations

from strom.security.operations import (
    OMITTED,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclResourceType,
    authorized_operations,
    operations_field,
)


def test_the_fields_are_kafka_s_bits() -> None:
    # READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    assert authorized_operations(AclResourceType.TOPIC, asked=True) == 0b1101_1111_1000
    # CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
    assert authorized_operations(AclResourceType.CLUSTER, asked=True) == 0b1_1111_1010_0000
    assert authorized_operations(AclResourceType.GROUP, asked=True) == (
        (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
    )
    assert authorized_operations(AclResourceType.TOPIC, asked=False) == OMITTED == -(2**31)


def test_every_concrete_resource_type_has_its_operations_and_none_is_a_wildcard() -> None:
    concrete = set(AclResourceType) - {AclResourceType.UNKNOWN, AclResourceType.ANY}
    assert set(SUPPORTED_OPERATIONS) == concrete
    wildcards = {AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL}
    for operations in SUPPORTED_OPERATIONS.values():
        assert operations and not operations & wildcards
        assert 0 < operations_field(operations) < 2**31
