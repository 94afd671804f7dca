"""The shapes of the responses strom builds, typed: one TypedDict per Kafka response and
per nested entity, version-independent (the union of the fields of the versions strom
serves; the codec keeps those the asked version has, protocol/codec.py: build).

A handler fills these instead of `dict[str, Any]`, so mypy checks every key and value it
sets; `tests/unit/protocol/test_response_shapes.py` checks each shape against Kafka's
message definitions (kio's schema) for every version strom serves: no key the protocol
lacks, no field a version requires left optional. Values are plain: ints for durations
(milliseconds) and instants (epoch milliseconds, -1 for none), ErrorCode for errors.
`SHAPES` maps each API to its response's shape.
"""

from __future__ import annotations

from strom.protocol.apis import ApiKey
from strom.protocol.responses.acls import (
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
)
from strom.protocol.responses.admin import (
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    DescribeLogDirsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerResponse,
)
from strom.protocol.responses.cluster import (
    DescribeClusterResponse,
    DescribeTopicPartitionsResponse,
    FindCoordinatorResponse,
    MetadataResponse,
)
from strom.protocol.responses.consumer_groups import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.responses.fetch import (
    FetchResponse,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
)
from strom.protocol.responses.groups import (
    ApiVersionsResponse,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from strom.protocol.responses.produce import InitProducerIdResponse, ProduceResponse
from strom.protocol.responses.quorum import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    DescribeQuorumResponse,
)
from strom.protocol.responses.quotas import (
    AlterClientQuotasResponse,
    DescribeClientQuotasResponse,
)
from strom.protocol.responses.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from strom.protocol.responses.scram import (
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsResponse,
)
from strom.protocol.responses.share import ShareAcknowledgeResponse, ShareFetchResponse
from strom.protocol.responses.share_groups import (
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
)
from strom.protocol.responses.share_state import (
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateResponse,
)
from strom.protocol.responses.transactions import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    EndTxnResponse,
    ListTransactionsResponse,
)
from strom.protocol.responses.txn_markers import WriteTxnMarkersResponse

SHAPES: dict[ApiKey, type] = {
    ApiKey.PRODUCE: ProduceResponse,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdResponse,
    ApiKey.FETCH: FetchResponse,
    ApiKey.LIST_OFFSETS: ListOffsetsResponse,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochResponse,
    ApiKey.CREATE_TOPICS: CreateTopicsResponse,
    ApiKey.DELETE_TOPICS: DeleteTopicsResponse,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsResponse,
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsResponse,
    ApiKey.ALTER_CONFIGS: AlterConfigsResponse,
    ApiKey.DELETE_RECORDS: DeleteRecordsResponse,
    ApiKey.DESCRIBE_LOG_DIRS: DescribeLogDirsResponse,
    ApiKey.UNREGISTER_BROKER: UnregisterBrokerResponse,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsResponse,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AlterPartitionReassignmentsResponse,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ListPartitionReassignmentsResponse,
    ApiKey.ELECT_LEADERS: ElectLeadersResponse,
    ApiKey.DESCRIBE_QUORUM: DescribeQuorumResponse,
    ApiKey.BROKER_REGISTRATION: BrokerRegistrationResponse,
    ApiKey.BROKER_HEARTBEAT: BrokerHeartbeatResponse,
    ApiKey.ALLOCATE_PRODUCER_IDS: AllocateProducerIdsResponse,
    ApiKey.ALTER_PARTITION: AlterPartitionResponse,
    ApiKey.METADATA: MetadataResponse,
    ApiKey.DESCRIBE_CLUSTER: DescribeClusterResponse,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: DescribeTopicPartitionsResponse,
    ApiKey.FIND_COORDINATOR: FindCoordinatorResponse,
    ApiKey.API_VERSIONS: ApiVersionsResponse,
    ApiKey.SASL_HANDSHAKE: SaslHandshakeResponse,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateResponse,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: DescribeUserScramCredentialsResponse,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AlterUserScramCredentialsResponse,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: DescribeClientQuotasResponse,
    ApiKey.ALTER_CLIENT_QUOTAS: AlterClientQuotasResponse,
    ApiKey.DESCRIBE_ACLS: DescribeAclsResponse,
    ApiKey.CREATE_ACLS: CreateAclsResponse,
    ApiKey.DELETE_ACLS: DeleteAclsResponse,
    ApiKey.JOIN_GROUP: JoinGroupResponse,
    ApiKey.SYNC_GROUP: SyncGroupResponse,
    ApiKey.HEARTBEAT: HeartbeatResponse,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatResponse,
    ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupDescribeResponse,
    ApiKey.SHARE_GROUP_HEARTBEAT: ShareGroupHeartbeatResponse,
    ApiKey.SHARE_GROUP_DESCRIBE: ShareGroupDescribeResponse,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: DescribeShareGroupOffsetsResponse,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: AlterShareGroupOffsetsResponse,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: DeleteShareGroupOffsetsResponse,
    ApiKey.SHARE_FETCH: ShareFetchResponse,
    ApiKey.SHARE_ACKNOWLEDGE: ShareAcknowledgeResponse,
    ApiKey.LEAVE_GROUP: LeaveGroupResponse,
    ApiKey.LIST_GROUPS: ListGroupsResponse,
    ApiKey.DESCRIBE_GROUPS: DescribeGroupsResponse,
    ApiKey.DELETE_GROUPS: DeleteGroupsResponse,
    ApiKey.OFFSET_COMMIT: OffsetCommitResponse,
    ApiKey.OFFSET_FETCH: OffsetFetchResponse,
    ApiKey.OFFSET_DELETE: OffsetDeleteResponse,
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnResponse,
    ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnResponse,
    ApiKey.END_TXN: EndTxnResponse,
    ApiKey.TXN_OFFSET_COMMIT: OffsetCommitResponse,
    ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersResponse,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: InitializeShareGroupStateResponse,
    ApiKey.READ_SHARE_GROUP_STATE: ReadShareGroupStateResponse,
    ApiKey.WRITE_SHARE_GROUP_STATE: WriteShareGroupStateResponse,
    ApiKey.DELETE_SHARE_GROUP_STATE: DeleteShareGroupStateResponse,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: ReadShareGroupStateSummaryResponse,
    ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsResponse,
    ApiKey.LIST_TRANSACTIONS: ListTransactionsResponse,
    ApiKey.DESCRIBE_PRODUCERS: DescribeProducersResponse,
}
"""Each API's response shape: every API strom serves has one."""
