"""The Kafka APIs strom serves and the version range of each.

The ranges follow what an Apache Kafka 4.0 broker advertises (see
shared/reference/kafka-4.0-api-versions.txt), clipped to the versions whose schemas kio
ships: clients pick the highest version both sides support, so advertising the same
ranges as a current broker means every client speaks to strom exactly as it would to
Kafka. An API is listed here only once a handler for it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True, slots=True)
class VersionRange:
    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


SUPPORTED_APIS: dict[ApiKey, VersionRange] = {
    # Produce v0-v2 carry magic v0/v1 message sets, which strom does not store.
    ApiKey.PRODUCE: VersionRange(3, 12),
    ApiKey.FETCH: VersionRange(4, 17),
    ApiKey.LIST_OFFSETS: VersionRange(1, 10),
    ApiKey.METADATA: VersionRange(0, 13),
    ApiKey.OFFSET_COMMIT: VersionRange(2, 9),
    ApiKey.OFFSET_FETCH: VersionRange(1, 9),
    ApiKey.FIND_COORDINATOR: VersionRange(0, 6),
    ApiKey.JOIN_GROUP: VersionRange(2, 9),
    ApiKey.HEARTBEAT: VersionRange(0, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 5),
    ApiKey.SYNC_GROUP: VersionRange(0, 5),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 6),
    ApiKey.LIST_GROUPS: VersionRange(0, 5),
    ApiKey.API_VERSIONS: VersionRange(0, 4),
    # Answered by the connection while a SASL listener's client authenticates; anywhere
    # else (a listener without SASL, or after authentication) with ILLEGAL_SASL_STATE.
    ApiKey.SASL_HANDSHAKE: VersionRange(0, 1),
    ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
    ApiKey.CREATE_TOPICS: VersionRange(2, 7),
    ApiKey.DELETE_TOPICS: VersionRange(1, 6),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(2, 4),
    # v0-v3 come from producers (one transaction each); v4+ batch several transactions
    # and may only verify (KIP-890): brokers send them.
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 4),
    ApiKey.END_TXN: VersionRange(0, 5),
    # From transaction coordinators to the partitions' leaders; Kafka 4.0 serves v1 only.
    ApiKey.WRITE_TXN_MARKERS: VersionRange(1, 1),
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 5),
    # Kafka 4.0 serves 1-3 (v0 went with KIP-896).
    ApiKey.DESCRIBE_ACLS: VersionRange(1, 3),
    ApiKey.CREATE_ACLS: VersionRange(1, 3),
    ApiKey.DELETE_ACLS: VersionRange(1, 3),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.DELETE_RECORDS: VersionRange(0, 2),
    # Kafka 4.0 serves 1-4 (v0 went with KIP-896; v4 adds the volume's total and usable bytes).
    ApiKey.DESCRIBE_LOG_DIRS: VersionRange(1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: VersionRange(0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: VersionRange(0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.DESCRIBE_QUORUM: VersionRange(0, 2),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 2),
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0),
    ApiKey.UNREGISTER_BROKER: VersionRange(0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0),
    ApiKey.LIST_TRANSACTIONS: VersionRange(0, 1),
    # KIP-848 consumer groups (group.protocol=consumer); v1 adds the topic regex.
    ApiKey.CONSUMER_GROUP_HEARTBEAT: VersionRange(0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: VersionRange(0, 1),
    # KIP-932 share groups' membership: v1, as Kafka 4.1+ (4.0's early-access v0 is not).
    ApiKey.SHARE_GROUP_HEARTBEAT: VersionRange(1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: VersionRange(1, 1),
    # KIP-966: Kafka 4.0's kafka-topics.sh --describe asks this, page by page, when served.
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: VersionRange(0, 0),
    # KIP-932's share-state RPCs, from share-partition leaders and group coordinators to
    # the share coordinator (Kafka 4.1+'s versions; Write and the summary v1 add
    # KIP-1226's DeliveryCompleteCount). Brokers only, as Kafka lists them.
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: VersionRange(0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: VersionRange(0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: VersionRange(0, 1),
    ApiKey.DELETE_SHARE_GROUP_STATE: VersionRange(0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: VersionRange(0, 1),
    # KIP-932 share groups: v1 is what Kafka 4.1+ and librdkafka's ShareConsumer speak;
    # v2 adds KIP-1222's renew acknowledgements and ShareFetch's acquire mode.
    ApiKey.SHARE_FETCH: VersionRange(1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: VersionRange(1, 2),
    # KIP-932's share-group offset admin APIs, at Kafka 4.1+'s versions (Describe v1 adds
    # KIP-1226's lag).
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: VersionRange(0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: VersionRange(0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: VersionRange(0, 0),
}

# Served on the controller listener only, between strom's own nodes (Kafka brokers do not
# advertise them to clients either).
CONTROLLER_APIS: dict[ApiKey, VersionRange] = {
    ApiKey.BROKER_REGISTRATION: VersionRange(0, 4),
    ApiKey.BROKER_HEARTBEAT: VersionRange(0, 1),
    ApiKey.ALLOCATE_PRODUCER_IDS: VersionRange(0, 0),
    # Kafka 4.0 serves AlterPartition 2-3 (v3 adds each ISR member's broker epoch).
    ApiKey.ALTER_PARTITION: VersionRange(2, 3),
}

SERVED_APIS: dict[ApiKey, VersionRange] = {**SUPPORTED_APIS, **CONTROLLER_APIS}
