"""A share-partition's state, transcript by transcript: consumers acquire, acknowledge,
release and reject records; locks expire; strom's delays hold records back."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from strom.share.config import AutoOffsetReset, SharePartitionConfig
from strom.share.partition import SharePartitionState
from strom.share.records import ShareSnapshotValue, ShareUpdateValue, StateBatch
from strom.share.replay import DurableShareState
from strom.share.values import (
    AckBatch,
    AcknowledgeType,
    AcquiredRecords,
    DeadLetter,
    DeadLetterReason,
    FetchedRecord,
    RecordState,
    ShareDecision,
    SharePartitionId,
)

PARTITION = SharePartitionId("workers", uuid.UUID(int=7), "jobs", 0)
ACCEPT, RELEASE, REJECT, RENEW, GAP = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.RENEW,
    AcknowledgeType.GAP,
)


class Partition:
    """A share-partition over a log of records (offset -> timestamp), with every record
    it asked to write kept, so that each test can replay them."""

    def __init__(self, config: SharePartitionConfig, log: dict[int, int], now_ms: int = 0) -> None:
        self.log = log
        self.state, decision = SharePartitionState.initialize(
            PARTITION,
            config,
            log_start_offset=min(log, default=0),
            log_end_offset=max(log, default=-1) + 1,
            now_ms=now_ms,
        )
        self.written: list[ShareSnapshotValue | ShareUpdateValue] = list(decision.records)

    def fetch(self, member: str, now_ms: int, max_records: int = 100) -> ShareDecision:
        decision, _ = self.fetch_with_retry(member, now_ms, max_records)
        return decision

    def fetch_with_retry(
        self, member: str, now_ms: int, max_records: int = 100
    ) -> tuple[ShareDecision, int | None]:
        start = self.state.next_fetch_offset(now_ms)
        fetched = [FetchedRecord(o, ts) for o, ts in sorted(self.log.items()) if o >= start]
        decision, retry = self.state.acquire(member, start, fetched, max_records, now_ms)
        self.written += decision.records
        return decision, retry

    def ack(self, member: str, now_ms: int, *batches: tuple[int, int, int]) -> ShareDecision:
        acks = [AckBatch(first, last, (kind,)) for first, last, kind in batches]
        decision = self.state.acknowledge(member, acks, now_ms)
        self.written += decision.records
        return decision

    def tick(self, now_ms: int) -> ShareDecision:
        decision = self.state.tick(now_ms)
        self.written += decision.records
        return decision

    def leave(self, member: str, now_ms: int) -> ShareDecision:
        decision = self.state.release_member(member, now_ms)
        self.written += decision.records
        return decision

    def copied(self, now_ms: int, *letters: DeadLetter) -> ShareDecision:
        decision = self.state.dead_letters_copied(letters, now_ms)
        self.written += decision.records
        return decision

    def states(self) -> dict[int, tuple[RecordState, int]]:
        return {o: (r.state, r.delivery_count) for o, r in self.state.records.items()}

    def replayed(self) -> DurableShareState:
        return DurableShareState.from_records(self.written)


def earliest(**settings: object) -> SharePartitionConfig:
    return replace(SharePartitionConfig(auto_offset_reset=AutoOffsetReset.EARLIEST), **settings)


def ten_records() -> dict[int, int]:
    return dict.fromkeys(range(10), 0)


def test_a_new_share_partition_starts_where_auto_offset_reset_says() -> None:
    latest = Partition(SharePartitionConfig(), ten_records())
    assert (latest.state.start_offset, latest.state.end_offset) == (10, 10)
    assert latest.written == [ShareSnapshotValue(0, 0, 0, 10, 0, 0, (), delivery_complete_count=0)]
    assert latest.fetch("a", now_ms=1).acquired == ()
    first = Partition(earliest(), ten_records())
    assert first.state.start_offset == 0
    by_duration = replace(SharePartitionConfig(), auto_offset_reset=AutoOffsetReset.BY_DURATION)
    state, _ = SharePartitionState.initialize(
        PARTITION, by_duration, log_start_offset=3, log_end_offset=10, now_ms=0,
        offset_for_duration=6,
    )  # fmt: skip
    assert state.start_offset == 6


def test_acquire_then_accept_moves_the_start_offset() -> None:
    p = Partition(earliest(), ten_records())
    got = p.fetch("a", now_ms=100, max_records=4)
    assert got.acquired == (AcquiredRecords(0, 3, 1),)
    assert got.records == ()  # an acquisition is not written
    assert p.state.next_deadline_ms() == 30_100
    done = p.ack("a", 200, (0, 2, ACCEPT))
    assert done.error is ErrorCode.none
    assert p.state.start_offset == 3
    assert done.records == (ShareUpdateValue(0, 0, 3, (), delivery_complete_count=0),)
    assert p.fetch("b", now_ms=300, max_records=100).acquired == (AcquiredRecords(4, 9, 1),)


def test_only_the_member_holding_a_record_may_acknowledge_it() -> None:
    p = Partition(earliest(), ten_records())
    p.fetch("a", now_ms=0, max_records=2)
    before = p.states()
    assert p.ack("b", 1, (0, 1, ACCEPT)).error is ErrorCode.invalid_record_state
    assert p.ack("a", 1, (0, 0, ACCEPT), (1, 1, RENEW), (0, 0, RELEASE)).error is (
        ErrorCode.invalid_record_state  # offset 0 twice
    )
    assert p.ack("a", 1, (1, 1, ACCEPT), (5, 5, ACCEPT)).error is ErrorCode.invalid_request
    assert p.states() == before  # all or nothing
    assert p.ack("a", 1, (0, 1, ACCEPT)).error is ErrorCode.none
    assert p.ack("a", 2, (0, 1, ACCEPT)).error is ErrorCode.none  # below SPSO: nothing to do
    p.fetch("a", now_ms=3, max_records=1)
    assert p.ack("a", 4, (2, 2, ACCEPT), (2, 2, ACCEPT)).error is ErrorCode.invalid_record_state


def test_malformed_acknowledgements_are_invalid_requests() -> None:
    p = Partition(earliest(), ten_records())
    p.fetch("a", now_ms=0, max_records=3)
    bad = [
        AckBatch(0, 2, (1, 1)),  # neither one type nor one per offset
        AckBatch(2, 0, (1,)),
        AckBatch(0, 0, (9,)),
        AckBatch(0, 10, (1,)),  # past every record in flight
    ]
    for batch in bad:
        assert p.state.acknowledge("a", [batch], 1).error is ErrorCode.invalid_request
    per_offset = AckBatch(0, 2, (ACCEPT, RELEASE, REJECT))
    assert p.state.acknowledge("a", [per_offset], 1).error is ErrorCode.none
    assert p.states()[1] == (RecordState.AVAILABLE, 1)
    assert p.states()[2] == (RecordState.ARCHIVED, 1)


def test_a_lock_expires_exactly_at_its_deadline() -> None:
    p = Partition(earliest(record_lock_duration_ms=1000), ten_records())
    p.fetch("a", now_ms=0, max_records=1)
    assert p.tick(999).records == ()
    assert p.states()[0] == (RecordState.ACQUIRED, 1)
    assert p.ack("a", 1000, (0, 0, ACCEPT)).error is ErrorCode.invalid_record_state
    assert p.states()[0] == (RecordState.AVAILABLE, 1)
    assert p.written[-1].state_batches == (StateBatch(0, 0, 0, 1),)
    assert p.fetch("b", now_ms=1000, max_records=1).acquired == (AcquiredRecords(0, 0, 2),)


def test_renew_restarts_the_lock_without_a_delivery() -> None:
    p = Partition(earliest(record_lock_duration_ms=1000), ten_records())
    p.fetch("a", now_ms=0, max_records=1)
    renewed = p.ack("a", 900, (0, 0, RENEW))
    assert (renewed.error, renewed.records) == (ErrorCode.none, ())
    assert p.state.next_deadline_ms() == 1900
    assert p.ack("a", 1500, (0, 0, ACCEPT)).error is ErrorCode.none
    off = Partition(earliest(renew_acknowledge_enable=False), ten_records())
    off.fetch("a", now_ms=0, max_records=1)
    assert off.ack("a", 1, (0, 0, RENEW)).error is ErrorCode.invalid_record_state


def test_the_delivery_count_limit_archives_and_dead_letters() -> None:
    p = Partition(earliest(delivery_count_limit=3, dead_letter_topic="jobs-dlq"), {0: 0})
    for delivery in (1, 2):
        assert p.fetch("a", now_ms=delivery).acquired == (AcquiredRecords(0, 0, delivery),)
        assert p.ack("a", delivery, (0, 0, RELEASE)).dead_letters == ()
    assert p.fetch("a", now_ms=3).acquired == (AcquiredRecords(0, 0, 3),)
    third = p.tick(3 + 30_000)  # the third lock runs out
    exceeded = DeadLetterReason.DELIVERY_COUNT_EXCEEDED
    letter = DeadLetter("jobs-dlq", "workers", "jobs", 0, 0, 0, 3, exceeded)
    assert third.dead_letters == (letter,)
    assert third.records[0].state_batches == (StateBatch(0, 0, 3, 3),)  # ARCHIVING, written
    assert (p.state.start_offset, p.states()[0]) == (0, (RecordState.ARCHIVING, 3))
    assert p.fetch("a", now_ms=40_000).acquired == ()
    copied = p.copied(40_001, letter)  # ARCHIVED: the start offset moves past it
    assert (copied.records[0].start_offset, copied.dead_letters, p.state.start_offset) == (
        1,
        (),
        1,
    )


def test_a_record_on_its_last_delivery_goes_alone() -> None:
    p = Partition(earliest(delivery_count_limit=3), dict.fromkeys(range(4), 0))
    p.fetch("a", now_ms=0, max_records=2)
    p.ack("a", 0, (0, 1, RELEASE))
    p.fetch("a", now_ms=0, max_records=1)
    p.ack("a", 0, (0, 0, RELEASE))  # offset 0 has had 2 deliveries of 3, offset 1 one
    assert p.fetch("b", now_ms=0).acquired == (AcquiredRecords(0, 0, 3),)
    assert p.fetch("c", now_ms=0).acquired == (
        AcquiredRecords(1, 1, 2),
        AcquiredRecords(2, 3, 1),
    )


def test_reject_archives_and_dead_letters_only_with_a_dead_letter_topic() -> None:
    p = Partition(earliest(dead_letter_topic="jobs-dlq"), ten_records())
    p.fetch("a", now_ms=0, max_records=4)
    rejected = p.ack("a", 1, (0, 1, REJECT), (3, 3, GAP))
    assert rejected.dead_letters == (
        DeadLetter("jobs-dlq", "workers", "jobs", 0, 0, 1, 1, DeadLetterReason.CLIENT_REJECT),
    )
    assert p.states()[3] == (RecordState.ARCHIVED, 1)
    assert p.states()[0] == p.states()[1] == (RecordState.ARCHIVING, 1)
    quiet = Partition(earliest(), ten_records())
    quiet.fetch("a", now_ms=0, max_records=1)
    assert quiet.ack("a", 1, (0, 0, REJECT)).dead_letters == ()
    assert (quiet.states().get(0), quiet.state.start_offset) == (None, 1)  # ARCHIVED at once


def test_archiving_holds_the_start_offset_until_its_copy_is_reported() -> None:
    p = Partition(earliest(dead_letter_topic="jobs-dlq"), ten_records())
    p.fetch("a", now_ms=0, max_records=4)
    (letter,) = p.ack("a", 1, (0, 0, ACCEPT), (1, 1, REJECT), (2, 3, ACCEPT)).dead_letters
    assert p.state.start_offset == 1  # held back by offset 1, ARCHIVING
    assert p.state.next_fetch_offset(now_ms=2) == 4
    assert p.ack("a", 2, (1, 1, ACCEPT)).error is ErrorCode.invalid_record_state
    assert p.state.archiving() == 1
    copied = p.copied(3, letter)
    assert copied.records[0].start_offset == 4
    assert p.state.archiving() == 0
    assert p.copied(4, letter).records == ()  # reported twice: nothing more
    assert p.replayed().view() == p.state.durable_view()


def test_a_state_loaded_with_archiving_records_owes_their_copies_again() -> None:
    config = earliest(dead_letter_topic="jobs-dlq", delivery_count_limit=2)
    p = Partition(config, ten_records())
    p.fetch("a", now_ms=0, max_records=3)
    p.ack("a", 1, (0, 0, REJECT), (1, 1, RELEASE))
    p.fetch("a", now_ms=2, max_records=1)  # offset 1, its second and last delivery
    p.ack("a", 3, (1, 1, RELEASE), (2, 2, REJECT))  # the crash comes before the copies
    loaded = SharePartitionState.load(PARTITION, config, p.written, now_ms=10)
    assert loaded.durable_view() == p.state.durable_view()
    assert loaded.next_fetch_offset(now_ms=10) == 3
    resumed = loaded.resume_archiving(now_ms=10)
    rejected, exceeded = DeadLetterReason.CLIENT_REJECT, DeadLetterReason.DELIVERY_COUNT_EXCEEDED
    assert resumed.records == ()
    assert resumed.dead_letters == (
        DeadLetter("jobs-dlq", "workers", "jobs", 0, 0, 0, 1, rejected),
        DeadLetter("jobs-dlq", "workers", "jobs", 0, 1, 1, 2, exceeded),  # inferred
        DeadLetter("jobs-dlq", "workers", "jobs", 0, 2, 2, 1, rejected),
    )
    done = loaded.dead_letters_copied(resumed.dead_letters, now_ms=11)
    assert done.records[0].start_offset == 3
    assert loaded.resume_archiving(now_ms=12) == ShareDecision()


def test_archiving_records_loaded_without_a_dead_letter_topic_are_archived() -> None:
    with_dlq = earliest(dead_letter_topic="jobs-dlq")
    p = Partition(with_dlq, ten_records())
    p.fetch("a", now_ms=0, max_records=2)
    p.ack("a", 1, (0, 1, REJECT))
    loaded = SharePartitionState.load(PARTITION, earliest(), p.written, now_ms=10)
    resumed = loaded.resume_archiving(now_ms=10)
    assert resumed.dead_letters == ()
    assert (resumed.records[0].start_offset, loaded.start_offset) == (2, 2)


def test_offsets_with_no_record_are_archived_as_they_are_passed() -> None:
    p = Partition(earliest(), {0: 0, 1: 0, 4: 0, 5: 0})
    got = p.fetch("a", now_ms=0)
    assert got.acquired == (AcquiredRecords(0, 1, 1), AcquiredRecords(4, 5, 1))
    assert got.records[0].state_batches == (StateBatch(2, 3, 4, 0),)
    assert p.ack("a", 1, (0, 5, ACCEPT)).error is ErrorCode.invalid_record_state
    per_offset = AckBatch(0, 5, (ACCEPT, ACCEPT, GAP, GAP, ACCEPT, ACCEPT))
    assert p.state.acknowledge("a", [per_offset], 1).error is ErrorCode.none
    assert p.state.start_offset == 6


def test_max_record_locks_bounds_the_records_in_flight() -> None:
    p = Partition(earliest(max_record_locks=4), ten_records())
    assert p.fetch("a", now_ms=0).acquired == (AcquiredRecords(0, 3, 1),)
    assert p.fetch("b", now_ms=0).acquired == ()
    p.ack("a", 1, (0, 1, ACCEPT))
    assert p.fetch("b", now_ms=2).acquired == (AcquiredRecords(4, 5, 1),)


def test_a_member_leaving_gives_its_records_back() -> None:
    p = Partition(earliest(), ten_records())
    p.fetch("a", now_ms=0, max_records=2)
    p.fetch("b", now_ms=0, max_records=2)
    gone = p.leave("a", now_ms=5)
    assert gone.records[0].state_batches == (StateBatch(0, 1, 0, 1),)
    assert p.states()[2] == (RecordState.ACQUIRED, 1)
    assert p.fetch("c", now_ms=6, max_records=2).acquired == (AcquiredRecords(0, 1, 2),)


def test_the_delivery_delay_holds_records_until_timestamp_plus_delay() -> None:
    log = {0: 1000, 1: 1000, 2: 5000}
    p = Partition(earliest(delivery_delay_ms=2000), log)
    got, retry = p.fetch_with_retry("a", now_ms=2999)
    assert (got.acquired, retry) == ((), 3000)
    got, retry = p.fetch_with_retry("a", now_ms=3000)
    assert (got.acquired, retry) == ((AcquiredRecords(0, 1, 1),), 7000)
    assert p.fetch("a", now_ms=7000).acquired == (AcquiredRecords(2, 2, 1),)


def test_a_late_timestamp_does_not_hold_back_the_records_after_it() -> None:
    p = Partition(earliest(delivery_delay_ms=100), {0: 10_000, 1: 0, 2: 0})
    assert p.fetch("a", now_ms=100).acquired == (AcquiredRecords(1, 2, 1),)
    assert p.state.start_offset == 0
    assert p.states()[0] == (RecordState.AVAILABLE, 0)


def test_the_redelivery_backoff_doubles_per_delivery_up_to_its_cap() -> None:
    config = earliest(redelivery_backoff_ms=100, redelivery_backoff_max_ms=300)
    assert [config.redelivery_backoff(n) for n in range(5)] == [0, 100, 200, 300, 300]
    p = Partition(config, {0: 0})
    now = 0
    for delivery, wait in ((1, 100), (2, 200), (3, 300)):
        assert p.fetch("a", now_ms=now).acquired == (AcquiredRecords(0, 0, delivery),)
        p.ack("a", now, (0, 0, RELEASE))
        got, retry = p.fetch_with_retry("a", now_ms=now + wait - 1)
        assert (got.acquired, retry) == ((), now + wait)
        assert p.state.next_backoff_end_ms(now) == now + wait
        now += wait
    assert p.fetch("a", now_ms=now).acquired == (AcquiredRecords(0, 0, 4),)


def test_a_snapshot_is_written_every_n_updates() -> None:
    p = Partition(earliest(snapshot_update_records=2), ten_records())
    p.fetch("a", now_ms=0)
    for offset in range(4):
        p.ack("a", 1, (offset, offset, ACCEPT))
    kinds = [type(record).__name__ for record in p.written]
    assert kinds == [
        "ShareSnapshotValue",
        "ShareUpdateValue",
        "ShareUpdateValue",
        "ShareSnapshotValue",
        "ShareUpdateValue",
    ]
    assert p.written[3].snapshot_epoch == 1
    assert p.written[4].snapshot_epoch == 1


def test_the_records_rebuild_the_state() -> None:
    config = earliest(redelivery_backoff_ms=50, snapshot_update_records=3)
    p = Partition(config, ten_records())
    p.fetch("a", now_ms=0, max_records=6)
    p.ack("a", 1, (0, 0, ACCEPT), (1, 1, RELEASE), (3, 3, REJECT))
    p.fetch("b", now_ms=60, max_records=3)
    p.tick(60 + 30_000)
    assert p.replayed().view() == p.state.durable_view()
    loaded = SharePartitionState.load(PARTITION, config, p.written, now_ms=50_000)
    assert loaded.durable_view() == p.state.durable_view()
    assert loaded.records[1].available_from_ms == 50_000 + 100  # backoff from load
    moved = SharePartitionState.load(PARTITION, config, p.written, now_ms=0, leader_epoch=4)
    assert moved.release_member("nobody", now_ms=0).records == ()
    moved.acquire("a", 0, [FetchedRecord(1, 0)], 1, now_ms=50_000)
    assert moved.acknowledge("a", [AckBatch(1, 1, (1,))], 50_001).records[0].leader_epoch == 4


def test_the_log_start_moving_takes_records_out_of_flight() -> None:
    p = Partition(earliest(), ten_records())
    p.fetch("a", now_ms=0, max_records=3)
    moved = p.state.on_log_start_offset(5, now_ms=1)
    assert (p.state.start_offset, moved.records[0].start_offset) == (5, 5)
    assert p.ack("a", 2, (0, 2, ACCEPT)).error is ErrorCode.none  # below SPSO: ignored
    assert p.fetch("a", now_ms=3).acquired == (AcquiredRecords(5, 9, 1),)


def test_settings_that_cannot_work_are_refused() -> None:
    for bad in (
        {"record_lock_duration_ms": 0},
        {"delivery_count_limit": 0},
        {"max_record_locks": 0},
        {"delivery_delay_ms": -1},
        {"redelivery_backoff_ms": 100, "redelivery_backoff_max_ms": 10},
        {"snapshot_update_records": 0},
    ):
        with pytest.raises(ValueError):
            SharePartitionConfig(**bad)
    by_duration = SharePartitionConfig(auto_offset_reset=AutoOffsetReset.BY_DURATION)
    with pytest.raises(ValueError):
        SharePartitionState.initialize(
            PARTITION, by_duration, log_start_offset=0, log_end_offset=0, now_ms=0
        )
