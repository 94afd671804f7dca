"""The roles of a Raft node and the legal changes between them.

`TRANSITIONS` is the one table of which role may follow which; `RaftNode._set_role`
refuses anything else.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TRANSITIONS", "RaftRole"]


class RaftRole(Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


# The legal role changes:
#   FOLLOWER      -> PRE_CANDIDATE  election timer fired (voters only)
#   FOLLOWER      -> CANDIDATE      TimeoutNow from the leader (transfer: no pre-vote)
#   PRE_CANDIDATE -> PRE_CANDIDATE  election timer fired again: a new pre-vote round
#   PRE_CANDIDATE -> CANDIDATE      pre-votes from a majority: term + 1, vote for self
#   PRE_CANDIDATE -> FOLLOWER       a leader of our term or newer; a newer term; pre-vote lost
#   CANDIDATE     -> PRE_CANDIDATE  election timer fired: the vote went nowhere
#   CANDIDATE     -> LEADER         votes from a majority
#   CANDIDATE     -> FOLLOWER       a leader of our term; a newer term; the vote lost
#   LEADER        -> FOLLOWER       a newer term; check-quorum failed
#   FOLLOWER      -> FOLLOWER       a newer term, or the leader of our term became known
TRANSITIONS: dict[RaftRole, frozenset[RaftRole]] = {
    RaftRole.FOLLOWER: frozenset({RaftRole.FOLLOWER, RaftRole.PRE_CANDIDATE, RaftRole.CANDIDATE}),
    RaftRole.PRE_CANDIDATE: frozenset(
        {RaftRole.PRE_CANDIDATE, RaftRole.CANDIDATE, RaftRole.FOLLOWER}
    ),
    RaftRole.CANDIDATE: frozenset({RaftRole.PRE_CANDIDATE, RaftRole.LEADER, RaftRole.FOLLOWER}),
    RaftRole.LEADER: frozenset({RaftRole.FOLLOWER}),
}
