"""A share-partition's decisions as WriteShareGroupState calls: written to the share
coordinator's core (`ShareStateShard`, each write made durable) after every step and
read back, they load the durable state of the live share-partition core."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.share.config import SharePartitionConfig
from strom.share.coordinator import ShareStateShard
from strom.share.partition import SharePartitionState
from strom.share.state_port import ShareStateKey, ShareStateRead
from strom.share.state_writes import consumer_error, snapshot_of_read, state_write
from strom.share.values import AckBatch, FetchedRecord, ShareDecision, SharePartitionId

PARTITION = SharePartitionId("g", uuid.UUID(int=3), "t", 0)
KEY = ShareStateKey("g", PARTITION.topic_id, 0)


def _durable(keeper: ShareStateShard, write_id: int) -> None:
    """Appended and committed; one record per write, so its id serves as its offset."""
    keeper.appended(write_id, write_id)
    keeper.durable(write_id)


def _write_all(keeper: ShareStateShard, decision: ShareDecision, state_epoch: int) -> None:
    for record in decision.records:
        written = keeper.write(KEY, state_write(record, state_epoch), 1, 0)
        assert written.answer == (ErrorCode.none, None)
        _durable(keeper, written.write_id)


def _read(keeper: ShareStateShard) -> ShareStateRead:
    read = keeper.read(KEY, 0, 1, 0)
    if read.records:
        _durable(keeper, read.write_id)
    return read.answer


_actions = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "ack", "tick"]),
        st.sampled_from(["a", "b"]),
        st.integers(0, 19),
        st.integers(0, 4),
        st.sampled_from([1, 2, 3]),
    ),
    max_size=30,
)


@settings(max_examples=100, deadline=None)
@given(_actions, st.integers(1, 3))
def test_writes_replayed_load_the_durable_state(
    actions: list[tuple[str, str, int, int, int]], snapshot_every: int
) -> None:
    config = SharePartitionConfig(
        record_lock_duration_ms=1000, delivery_count_limit=3, snapshot_update_records=snapshot_every
    )
    keeper = ShareStateShard(snapshot_update_records=snapshot_every)
    _durable(keeper, keeper.initialize(KEY, 0, -1, 1, 0).write_id)
    _read(keeper)  # the leader's first read: its epoch, 0, fences older leaders
    core, first = SharePartitionState.initialize(
        PARTITION, config, log_start_offset=0, log_end_offset=0, now_ms=0, leader_epoch=0
    )
    _write_all(keeper, first, 0)
    now = 0
    for kind, member, offset, width, ack_type in actions:
        now += 300
        if kind == "fetch":
            start = core.next_fetch_offset(now)
            fetched = [FetchedRecord(o, 0) for o in range(start, 20)]
            decision, _ = core.acquire(member, start, fetched, 5, now)
        elif kind == "ack":
            last = min(offset + width, core.end_offset - 1)
            batch = AckBatch(offset, max(offset, last), (ack_type,))
            decision = core.acknowledge(member, [batch], now)
        else:
            decision = core.tick(now)
        _write_all(keeper, decision, 0)
        read = _read(keeper)
        loaded = SharePartitionState.load(PARTITION, config, [snapshot_of_read(read, 0, now)], now)
        assert loaded.durable_view() == core.durable_view()


def test_port_errors_become_consumer_errors() -> None:
    assert consumer_error(ErrorCode.not_coordinator) is ErrorCode.coordinator_not_available
    assert consumer_error(ErrorCode.fenced_leader_epoch) is ErrorCode.not_leader_or_follower
    assert consumer_error(ErrorCode.fenced_state_epoch) is ErrorCode.not_leader_or_follower
    assert consumer_error(ErrorCode.unknown_topic_or_partition) is (
        ErrorCode.unknown_topic_or_partition
    )
    # Kafka answers UNKNOWN_SERVER_ERROR for a share-partition never initialized.
    assert consumer_error(ErrorCode.invalid_request) is ErrorCode.invalid_request
    assert consumer_error(ErrorCode.kafka_storage_error) is ErrorCode.unknown_server_error
