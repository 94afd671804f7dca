"""Merging state batches, as Kafka's share coordinator merges them
(PersisterStateBatchCombiner): the kept batches and the new ones become the shortest
list of non-overlapping batches covering their union, clipped at the start offset.

Where batches overlap, the one with the higher delivery count wins, and at equal counts
the higher delivery state (ARCHIVED 4 > ARCHIVING 3 > ACKNOWLEDGED 2 > AVAILABLE 0). A
share-partition's leader only ever moves an offset up that order (a delivery raises the
count, an acknowledgement or an archive is final, ARCHIVING only becomes ARCHIVED at the
same count), so the winner is also the newest write, and a
write that arrives twice or late changes nothing. Adjacent pieces with the same state
and count are joined.

A sweep over the batches' ends: O(n log n) in the number of batches, whatever offsets
they span (a batch may cover 2^63 offsets).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from strom.share.records import StateBatch

__all__ = ["combine_batches"]

_Priority = tuple[int, int]
"""(delivery count, delivery state): the higher wins."""


def _clipped(batches: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    out: list[StateBatch] = []
    for batch in batches:
        if start_offset != -1 and batch.last_offset < start_offset:
            continue
        if start_offset == -1 or batch.first_offset >= start_offset:
            out.append(batch)
        else:
            out.append(
                StateBatch(
                    start_offset, batch.last_offset, batch.delivery_state, batch.delivery_count
                )
            )
    return out


def combine_batches(
    kept: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """The merged batches in offset order; `start_offset` -1 clips nothing."""
    batches = _clipped([*kept, *new], start_offset)
    if len(batches) <= 1:
        return tuple(batches)
    # (offset, 0 for an end / 1 for a begin, priority): ends sort before begins.
    events: list[tuple[int, int, _Priority]] = []
    for batch in batches:
        priority = (batch.delivery_count, batch.delivery_state)
        events.append((batch.first_offset, 1, priority))
        events.append((batch.last_offset + 1, 0, priority))
    events.sort()
    active: dict[_Priority, int] = {}
    heap: list[tuple[int, int]] = []  # negated priorities: a max-heap, stale tops skipped
    out: list[StateBatch] = []
    open_from = 0
    winner: _Priority | None = None
    i = 0
    while i < len(events):
        offset = events[i][0]
        if winner is not None and offset > open_from:
            _append(out, open_from, offset - 1, winner)
        while i < len(events) and events[i][0] == offset:
            _, begin, priority = events[i]
            i += 1
            if begin:
                if active.get(priority, 0) == 0:
                    heapq.heappush(heap, (-priority[0], -priority[1]))
                active[priority] = active.get(priority, 0) + 1
            else:
                active[priority] -= 1
        while heap and active.get((-heap[0][0], -heap[0][1]), 0) == 0:
            heapq.heappop(heap)
        winner = (-heap[0][0], -heap[0][1]) if heap else None
        open_from = offset
    return tuple(out)


def _append(out: list[StateBatch], first: int, last: int, winner: _Priority) -> None:
    count, state = winner
    if out:
        tail = out[-1]
        if (
            tail.last_offset + 1 == first
            and tail.delivery_state == state
            and tail.delivery_count == count
        ):
            out[-1] = StateBatch(tail.first_offset, last, state, count)
            return
    out.append(StateBatch(first, last, state, count))
