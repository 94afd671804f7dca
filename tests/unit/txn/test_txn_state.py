"""The transaction states and their legal changes."""

from __future__ import annotations

import itertools

import pytest

from strom.txn.state import PREVIOUS_STATES, TxnState, can_follow

S = TxnState


def test_the_status_bytes_and_names_are_kafkas() -> None:
    assert [(s.value, s.wire_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]


def test_a_commit_runs_empty_ongoing_prepare_complete() -> None:
    path = [S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING]
    for old, new in itertools.pairwise(path):
        assert can_follow(new, old, transaction_version=0), (old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.EMPTY, S.PREPARE_COMMIT),  # nothing to commit
        (S.PREPARE_COMMIT, S.PREPARE_ABORT),  # a decided commit cannot turn into an abort
        (S.PREPARE_ABORT, S.COMPLETE_COMMIT),
        (S.COMPLETE_COMMIT, S.COMPLETE_COMMIT),
        (S.ONGOING, S.EMPTY),  # InitProducerId fences, it does not drop the transaction
        (S.ONGOING, S.DEAD),  # an open transaction never expires
        (S.DEAD, S.EMPTY),
        (S.PREPARE_EPOCH_FENCE, S.PREPARE_COMMIT),
    ],
)
def test_illegal_changes(old: TxnState, new: TxnState) -> None:
    assert not can_follow(new, old, transaction_version=2)


def test_only_version_2_clients_abort_a_transaction_that_may_not_have_begun() -> None:
    for old in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        assert not can_follow(S.PREPARE_ABORT, old, transaction_version=1)
        assert can_follow(S.PREPARE_ABORT, old, transaction_version=2)
    assert can_follow(S.PREPARE_ABORT, S.ONGOING, transaction_version=0)
    assert can_follow(S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE, transaction_version=0)


def test_every_state_but_empty_can_be_reached_and_only_dead_is_final() -> None:
    reachable = {new for new, olds in PREVIOUS_STATES.items() if olds}
    assert reachable == set(TxnState)
    left_from = {old for olds in PREVIOUS_STATES.values() for old in olds}
    assert set(TxnState) - left_from == {S.DEAD}


def test_expiry_and_in_progress() -> None:
    assert {s for s in TxnState if s.expirable} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert {s for s in TxnState if s.in_progress} == {
        S.ONGOING,
        S.PREPARE_COMMIT,
        S.PREPARE_ABORT,
    }
