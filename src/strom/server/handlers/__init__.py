"""One handler per Kafka API: `async (context, request) -> response body | None`.

Every handler takes the context of its group of APIs (handlers/ports.py), never the
broker. `client_handlers` and `controller_handlers` bind the contexts (built once by the
broker) into `async (request) -> response body | None` dispatch tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers import (
    acls,
    admin,
    cluster,
    configs,
    consumer_groups,
    coordinator,
    delete_records,
    elections,
    fetch,
    groups,
    log_dirs,
    offsets,
    produce,
    quorum,
    quotas,
    reassignments,
    sasl,
    scram,
    share_fetch,
    share_groups,
    share_offsets,
    share_state,
    topic_partitions,
    transactions,
    txn_admin,
    txn_markers,
    txn_offsets,
)
from strom.server.handlers.ports import (
    AdminContext,
    ClusterContext,
    FetchContext,
    GroupContext,
    PrivateContext,
    ProduceContext,
    QuorumContext,
    TxnContext,
)

Handler = Callable[[Request], Awaitable[Any | None]]
"""A bound handler: what a connection dispatches to."""


@dataclass(frozen=True, slots=True)
class Contexts:
    """Every group of handlers' context, built once by the broker."""

    produce: ProduceContext
    fetch: FetchContext
    groups: GroupContext
    cluster: ClusterContext
    quorum: QuorumContext
    admin: AdminContext
    txns: TxnContext
    txn_markers: txn_markers.TxnMarkersContext
    """WriteTxnMarkers, which transaction coordinators send to the partitions' leaders on
    their client listeners (Kafka: the inter-broker listener)."""
    share_state: share_state.ShareStateContext
    """The share-state RPCs, which share-partition leaders and group coordinators send to
    the share coordinator (KIP-932)."""
    share: share_fetch.ShareContext
    """ShareFetch and ShareAcknowledge (KIP-932)."""
    share_offsets: share_offsets.ShareOffsetsContext
    """Describe, Alter and DeleteShareGroupOffsets (KIP-932)."""
    private: PrivateContext
    """Not a dispatch table's: each node-to-node connection's PrivateSession gets it."""


def _contextual(contexts: Contexts) -> dict[ApiKey, Handler]:
    return {
        ApiKey.API_VERSIONS: partial(cluster.handle_api_versions, contexts.cluster),
        ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
        ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
        ApiKey.METADATA: partial(cluster.handle_metadata, contexts.cluster),
        ApiKey.DESCRIBE_CLUSTER: partial(cluster.handle_describe_cluster, contexts.cluster),
        ApiKey.DESCRIBE_TOPIC_PARTITIONS: partial(
            topic_partitions.handle_describe_topic_partitions, contexts.cluster
        ),
        ApiKey.PRODUCE: partial(produce.handle_produce, contexts.produce),
        ApiKey.INIT_PRODUCER_ID: partial(produce.handle_init_producer_id, contexts.produce),
        ApiKey.FETCH: partial(fetch.handle_fetch, contexts.fetch),
        ApiKey.LIST_OFFSETS: partial(fetch.handle_list_offsets, contexts.fetch),
        ApiKey.DESCRIBE_LOG_DIRS: partial(log_dirs.handle_describe_log_dirs, contexts.fetch),
        ApiKey.DELETE_RECORDS: partial(delete_records.handle_delete_records, contexts.fetch),
        ApiKey.OFFSET_FOR_LEADER_EPOCH: partial(
            fetch.handle_offset_for_leader_epoch, contexts.fetch
        ),
        ApiKey.FIND_COORDINATOR: partial(coordinator.handle_find_coordinator, contexts.txns),
        ApiKey.JOIN_GROUP: partial(groups.handle_join_group, contexts.groups),
        ApiKey.SYNC_GROUP: partial(groups.handle_sync_group, contexts.groups),
        ApiKey.HEARTBEAT: partial(groups.handle_heartbeat, contexts.groups),
        ApiKey.LEAVE_GROUP: partial(groups.handle_leave_group, contexts.groups),
        ApiKey.LIST_GROUPS: partial(groups.handle_list_groups, contexts.groups),
        ApiKey.DESCRIBE_GROUPS: partial(groups.handle_describe_groups, contexts.groups),
        ApiKey.DELETE_GROUPS: partial(groups.handle_delete_groups, contexts.groups),
        ApiKey.CONSUMER_GROUP_HEARTBEAT: partial(
            consumer_groups.handle_consumer_group_heartbeat, contexts.groups
        ),
        ApiKey.CONSUMER_GROUP_DESCRIBE: partial(
            consumer_groups.handle_consumer_group_describe, contexts.groups
        ),
        ApiKey.SHARE_GROUP_HEARTBEAT: partial(
            share_groups.handle_share_group_heartbeat, contexts.groups
        ),
        ApiKey.SHARE_GROUP_DESCRIBE: partial(
            share_groups.handle_share_group_describe, contexts.groups
        ),
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: partial(
            share_offsets.handle_describe_share_group_offsets, contexts.share_offsets
        ),
        ApiKey.ALTER_SHARE_GROUP_OFFSETS: partial(
            share_offsets.handle_alter_share_group_offsets, contexts.share_offsets
        ),
        ApiKey.DELETE_SHARE_GROUP_OFFSETS: partial(
            share_offsets.handle_delete_share_group_offsets, contexts.share_offsets
        ),
        ApiKey.SHARE_FETCH: partial(share_fetch.handle_share_fetch, contexts.share),
        ApiKey.SHARE_ACKNOWLEDGE: partial(share_fetch.handle_share_acknowledge, contexts.share),
        ApiKey.OFFSET_COMMIT: partial(offsets.handle_offset_commit, contexts.groups),
        ApiKey.OFFSET_FETCH: partial(offsets.handle_offset_fetch, contexts.groups),
        ApiKey.OFFSET_DELETE: partial(offsets.handle_offset_delete, contexts.groups),
        ApiKey.TXN_OFFSET_COMMIT: partial(txn_offsets.handle_txn_offset_commit, contexts.groups),
        ApiKey.DESCRIBE_QUORUM: partial(quorum.handle_describe_quorum, contexts.quorum),
        ApiKey.CREATE_TOPICS: partial(admin.handle_create_topics, contexts.admin),
        ApiKey.DELETE_TOPICS: partial(admin.handle_delete_topics, contexts.admin),
        ApiKey.CREATE_PARTITIONS: partial(admin.handle_create_partitions, contexts.admin),
        ApiKey.DESCRIBE_CONFIGS: partial(configs.handle_describe_configs, contexts.admin),
        ApiKey.ALTER_CONFIGS: partial(configs.handle_alter_configs, contexts.admin),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: partial(
            configs.handle_incremental_alter_configs, contexts.admin
        ),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: partial(
            reassignments.handle_alter_partition_reassignments, contexts.admin
        ),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: partial(
            reassignments.handle_list_partition_reassignments, contexts.admin
        ),
        ApiKey.ELECT_LEADERS: partial(elections.handle_elect_leaders, contexts.admin),
        ApiKey.UNREGISTER_BROKER: partial(elections.handle_unregister_broker, contexts.admin),
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: partial(
            scram.handle_describe_user_scram_credentials, contexts.admin
        ),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: partial(
            scram.handle_alter_user_scram_credentials, contexts.admin
        ),
        ApiKey.DESCRIBE_ACLS: partial(acls.handle_describe_acls, contexts.admin),
        ApiKey.DESCRIBE_CLIENT_QUOTAS: partial(
            quotas.handle_describe_client_quotas, contexts.admin
        ),
        ApiKey.ALTER_CLIENT_QUOTAS: partial(quotas.handle_alter_client_quotas, contexts.admin),
        ApiKey.CREATE_ACLS: partial(acls.handle_create_acls, contexts.admin),
        ApiKey.DELETE_ACLS: partial(acls.handle_delete_acls, contexts.admin),
        **_transactional(contexts.txns),
        **_share_state(contexts.share_state),
        ApiKey.WRITE_TXN_MARKERS: partial(
            txn_markers.handle_write_txn_markers, contexts.txn_markers
        ),
    }


def _transactional(context: TxnContext) -> dict[ApiKey, Handler]:
    return {
        ApiKey.ADD_PARTITIONS_TO_TXN: partial(transactions.handle_add_partitions_to_txn, context),
        ApiKey.ADD_OFFSETS_TO_TXN: partial(transactions.handle_add_offsets_to_txn, context),
        ApiKey.END_TXN: partial(transactions.handle_end_txn, context),
        ApiKey.DESCRIBE_TRANSACTIONS: partial(txn_admin.handle_describe_transactions, context),
        ApiKey.LIST_TRANSACTIONS: partial(txn_admin.handle_list_transactions, context),
        ApiKey.DESCRIBE_PRODUCERS: partial(txn_admin.handle_describe_producers, context),
    }


def _share_state(context: share_state.ShareStateContext) -> dict[ApiKey, Handler]:
    return {
        ApiKey.INITIALIZE_SHARE_GROUP_STATE: partial(
            share_state.handle_initialize_share_group_state, context
        ),
        ApiKey.READ_SHARE_GROUP_STATE: partial(share_state.handle_read_share_group_state, context),
        ApiKey.WRITE_SHARE_GROUP_STATE: partial(
            share_state.handle_write_share_group_state, context
        ),
        ApiKey.DELETE_SHARE_GROUP_STATE: partial(
            share_state.handle_delete_share_group_state, context
        ),
        ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: partial(
            share_state.handle_read_share_group_state_summary, context
        ),
    }


def _controller_contextual(contexts: Contexts) -> dict[ApiKey, Handler]:
    """The controller listener's own APIs: those that run at the active controller are
    answered there (or refused with NOT_CONTROLLER), never forwarded again."""
    return {
        ApiKey.BROKER_REGISTRATION: partial(quorum.handle_broker_registration, contexts.quorum),
        ApiKey.BROKER_HEARTBEAT: partial(quorum.handle_broker_heartbeat, contexts.quorum),
        ApiKey.ALLOCATE_PRODUCER_IDS: partial(quorum.handle_allocate_producer_ids, contexts.quorum),
        ApiKey.DESCRIBE_QUORUM: partial(quorum.controller_describe_quorum, contexts.quorum),
        ApiKey.ALTER_PARTITION: partial(quorum.handle_alter_partition, contexts.quorum),
        ApiKey.CREATE_TOPICS: partial(admin.controller_create_topics, contexts.admin),
        ApiKey.DELETE_TOPICS: partial(admin.controller_delete_topics, contexts.admin),
        ApiKey.CREATE_PARTITIONS: partial(admin.controller_create_partitions, contexts.admin),
        ApiKey.ALTER_CONFIGS: partial(configs.controller_alter_configs, contexts.admin),
        ApiKey.INCREMENTAL_ALTER_CONFIGS: partial(
            configs.controller_incremental_alter_configs, contexts.admin
        ),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS: partial(
            reassignments.controller_alter_partition_reassignments, contexts.admin
        ),
        ApiKey.LIST_PARTITION_REASSIGNMENTS: partial(
            reassignments.controller_list_partition_reassignments, contexts.admin
        ),
        ApiKey.ELECT_LEADERS: partial(elections.controller_elect_leaders, contexts.admin),
        ApiKey.UNREGISTER_BROKER: partial(elections.controller_unregister_broker, contexts.admin),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: partial(
            scram.controller_alter_user_scram_credentials, contexts.admin
        ),
        ApiKey.CREATE_ACLS: partial(acls.controller_create_acls, contexts.admin),
        ApiKey.DELETE_ACLS: partial(acls.controller_delete_acls, contexts.admin),
        ApiKey.ALTER_CLIENT_QUOTAS: partial(quotas.controller_alter_client_quotas, contexts.admin),
    }


def client_handlers(contexts: Contexts) -> dict[ApiKey, Handler]:
    """The client listeners' dispatch table."""
    return _contextual(contexts)


def controller_handlers(contexts: Contexts) -> dict[ApiKey, Handler]:
    """The controller listener's own APIs; every other one is answered as on a client
    listener (Broker.dispatch_controller). All of them take their context now."""
    return _controller_contextual(contexts)
