"""The leader's memory of its own refusals (replication/admission.py), without a log."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.protocol.records import BatchHeader, NewRecord, encode_batch, validate_batches
from strom.replication.admission import Refusals

REFUSED = ErrorCode.not_enough_replicas
GAP = ErrorCode.out_of_order_sequence_number


def still_expected(_refused: BatchHeader) -> bool:
    """The log still waits for the refused batch next."""
    return True


def header(producer_id: int, epoch: int, sequence: int) -> BatchHeader:
    data = encode_batch(
        [NewRecord(None, b"v")],
        base_timestamp_ms=1_000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )
    return validate_batches(data, max_batch_bytes=1 << 20)[0][1]


def test_a_gap_that_starts_at_a_refused_batch_gets_the_refusal() -> None:
    refusals = Refusals()
    refusals.refused([header(7, 0, 10)], REFUSED, "1 in-sync replica(s)")
    explained = refusals.explain([header(7, 0, 12)], GAP, still_expected)
    assert explained is not None
    error, why = explained
    assert error == REFUSED
    assert why.startswith("1 in-sync replica(s)") and "sequence 10" in why
    # UNKNOWN_PRODUCER_ID is the log's word for the same gap of a producer it never saw.
    assert (
        refusals.explain([header(7, 0, 11)], ErrorCode.unknown_producer_id, still_expected)
        is not None
    )


def test_only_sequence_errors_of_the_refused_producer_and_epoch_after_it_are_explained() -> None:
    refusals = Refusals()
    refusals.refused([header(7, 3, 10)], REFUSED, "why")
    assert (
        refusals.explain([header(7, 3, 12)], ErrorCode.invalid_producer_epoch, still_expected)
        is None
    )
    assert refusals.explain([header(8, 3, 12)], GAP, still_expected) is None  # another producer
    assert refusals.explain([header(7, 2, 12)], GAP, still_expected) is None  # another epoch
    assert refusals.explain([header(7, 4, 12)], GAP, still_expected) is None
    assert refusals.explain([header(7, 3, 9)], GAP, still_expected) is None  # behind it: a rewind
    assert refusals.explain([header(7, 3, 10)], GAP, still_expected) is None


def test_the_gap_starts_at_the_first_refusal_and_closes_when_the_producer_is_admitted() -> None:
    refusals = Refusals()
    refusals.refused([header(7, 0, 10)], REFUSED, "first")
    refusals.refused([header(7, 0, 11)], REFUSED, "second")
    assert (
        refusals.explain([header(7, 0, 11)], GAP, still_expected) is not None
    )  # after 10, still open
    refusals.admitted([header(7, 0, 10)])
    assert len(refusals) == 0
    assert refusals.explain([header(7, 0, 12)], GAP, still_expected) is None


def test_a_refusal_under_a_new_epoch_replaces_the_old_epochs() -> None:
    refusals = Refusals()
    refusals.refused([header(7, 0, 10)], REFUSED, "old")
    refusals.refused([header(7, 1, 0)], REFUSED, "new")
    assert refusals.explain([header(7, 0, 12)], GAP, still_expected) is None
    assert refusals.explain([header(7, 1, 3)], GAP, still_expected) is not None


def test_a_gap_is_not_put_down_to_a_refused_batch_the_log_no_longer_expects() -> None:
    """Written since by another leader and replicated here, say: the gap is elsewhere."""
    refusals = Refusals()
    refusals.refused([header(7, 0, 10)], REFUSED, "why")
    assert refusals.explain([header(7, 0, 12)], GAP, lambda refused: False) is None
    seen: list[int] = []

    def expects(refused: BatchHeader) -> bool:
        seen.append(refused.base_sequence)
        return True

    assert refusals.explain([header(7, 0, 12)], GAP, expects) is not None
    assert seen == [10]  # asked about the refused batch itself


def test_non_idempotent_batches_are_not_remembered() -> None:
    refusals = Refusals()
    refusals.refused([header(-1, -1, -1)], REFUSED, "why")
    assert len(refusals) == 0


def test_sequences_wrap() -> None:
    refusals = Refusals()
    refusals.refused([header(7, 0, 2**31 - 2)], REFUSED, "why")
    assert refusals.explain([header(7, 0, 1)], GAP, still_expected) is not None


@given(st.lists(st.integers(min_value=0, max_value=5_000), max_size=300))
def test_memory_stays_bounded_by_its_capacity(producer_ids: list[int]) -> None:
    refusals = Refusals(capacity=64)
    for producer_id in producer_ids:
        refusals.refused([header(producer_id, 0, 0)], REFUSED, "why")
        assert len(refusals) <= 64
    if producer_ids:  # the newest is always remembered
        assert refusals.explain([header(producer_ids[-1], 0, 1)], GAP, still_expected)
