"""Which records of one `__share_group_state` partition are still needed: a pure core.

A share-partition's state is rebuilt from its latest ShareSnapshot and the ShareUpdates
after it, so every record of a key before its latest snapshot is redundant, and so is
everything of a key whose latest snapshot-key record is a tombstone. The share
coordinator prunes the partition (moves its log start forward, as DeleteRecords does) to
the lowest offset still needed: Kafka's rule (ShareCoordinatorOffsetsManager), kept here
as a function of the replayed state rather than as Kafka's running minimum, so that the
order in which different keys' records are replayed does not matter:

    live keys       the lowest offset of their latest snapshots
    no live key     the offset of the latest tombstone (the tombstone itself is kept)
    nothing yet     None: nothing is redundant

One addition to Kafka's rule: a key whose first replayed record is an update (no
snapshot before it, which the coordinator never writes but a log may hold) needs that
update, and so the rest of its updates; Kafka tracks snapshots only and would prune them.

Transitions of a key (each with the offset of the record replayed):

    absent   --snapshot(o)--> needed at o
    absent   --update(o)-->   needed at o
    needed   --snapshot(o)--> needed at o
    needed   --update(o)-->   needed (unchanged)
    any      --tombstone(o)-> absent; the latest tombstone is at least o
"""

from __future__ import annotations

from strom.share.state_port import ShareStateKey

__all__ = ["ShareStateOffsets"]


class ShareStateOffsets:
    """The offsets a partition's replayed records still need, per share-partition key."""

    def __init__(self) -> None:
        self._needed: dict[ShareStateKey, int] = {}
        self._latest_tombstone: int | None = None

    def snapshot(self, key: ShareStateKey, offset: int) -> None:
        self._needed[key] = offset

    def update(self, key: ShareStateKey, offset: int) -> None:
        self._needed.setdefault(key, offset)

    def tombstone(self, key: ShareStateKey, offset: int) -> None:
        self._needed.pop(key, None)
        if self._latest_tombstone is None or offset > self._latest_tombstone:
            self._latest_tombstone = offset

    def needed(self, key: ShareStateKey) -> int | None:
        """The offset from which `key`'s records are needed (None: none are)."""
        return self._needed.get(key)

    def redundant_below(self) -> int | None:
        """Every replayed record below this offset is redundant (None: nothing is known
        to be)."""
        if self._needed:
            return min(self._needed.values())
        return self._latest_tombstone
