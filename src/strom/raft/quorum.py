"""Majority arithmetic for a fixed set of voters: elections, commit index, check-quorum.

Kept apart from the Raft core (as etcd keeps its `quorum` package) so the few lines that
decide safety can be read and tested on their own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from enum import Enum


class VoteResult(Enum):
    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def majority(voter_count: int) -> int:
    """How many of `voter_count` voters make a quorum."""
    return voter_count // 2 + 1


def vote_result(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """WON with a majority of grants, LOST once a majority can no longer be reached."""
    needed = majority(len(voters))
    granted = sum(1 for voter in voters if votes.get(voter) is True)
    if granted >= needed:
        return VoteResult.WON
    rejected = sum(1 for voter in voters if votes.get(voter) is False)
    if len(voters) - rejected < needed:
        return VoteResult.LOST
    return VoteResult.PENDING


def quorum_index(match_indexes: Collection[int]) -> int:
    """The highest index that a majority of the voters (one match index each) has."""
    ordered = sorted(match_indexes, reverse=True)
    return ordered[majority(len(ordered)) - 1]


def has_quorum(voters: Collection[int], active: Iterable[int]) -> bool:
    """Whether the voters in `active` are a majority of `voters`."""
    return len(set(active) & set(voters)) >= majority(len(voters))
