"""Where a follower's log diverged from its leader's: a pure decision.

A follower that starts following a leader (after an election, or after a restart) may
hold records its leader does not: records of an older leader that never reached the
high watermark. It asks the leader, with OffsetForLeaderEpoch, where its own latest
epoch ends in the leader's log; a leader also reports a divergence in a Fetch answer
(`diverging_epoch`) when the follower's last fetched epoch does not end where the
follower is. Either way the answer is (epoch, end offset) from the leader's epoch cache:
the largest epoch of the leader's at or below the one asked about, and the offset where
the leader's next epoch begins (or its log end).

The follower keeps the records both logs agree on: everything below the leader's end
offset that it also holds under that same epoch, so it truncates to the smaller of the
leader's end and the end of that epoch in its own log.
"""

from __future__ import annotations

from collections.abc import Callable

UNDEFINED = -1

EndOffsetFor = Callable[[int], tuple[int, int]]
"""Local epoch lookup: end_offset_for(epoch) -> (largest local epoch <= it, its end)."""


def truncation_offset(
    leader_epoch: int,
    leader_end_offset: int,
    *,
    local_end_offset_for: EndOffsetFor,
    log_end_offset: int,
    high_watermark: int,
) -> int:
    """The offset a follower truncates its log to, given the leader's (epoch, end).

    An undefined answer (the leader knows no epoch at or below the follower's: its log
    was emptied, or the follower's records predate epochs) leaves only the high
    watermark as known-good."""
    if leader_epoch == UNDEFINED or leader_end_offset == UNDEFINED:
        return min(high_watermark, log_end_offset)
    local_epoch, local_end = local_end_offset_for(leader_epoch)
    if local_epoch == UNDEFINED:  # no epochs here at all: an empty log
        return min(leader_end_offset, log_end_offset)
    return min(leader_end_offset, local_end, log_end_offset)
