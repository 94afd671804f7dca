"""group_harness's driver with transactions: TxnOffsetCommits, the markers that end
them, and a log to replay.

`log` is `__consumer_offsets` as the shell writes it: each decision's records appended
when it is decided (one batch; transactional, with its producer id, for a
TxnOffsetCommit), a marker when the transaction coordinator writes one (`marker`). A
failed write's batch is dropped from it. `complete_marker` is the transaction
coordinator telling the group coordinator the marker is durable (`complete_txn`);
`replayed` loads, on a new coordinator, what is durable in the log, in log order, and
`reload` makes that coordinator the live one.

A batch is found by its write id only while it is unsettled: write ids count from 1 in
each coordinator, so after a reload the new coordinator's ids repeat those of batches
already in the log."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any

from group_harness import Harness
from kio.schema.errors import ErrorCode

from strom.group import txn_offsets
from strom.group.coordinator import GroupCoordinator, Output
from strom.group.offsets import OffsetToCommit
from strom.group.records import Key, Value
from strom.group.state import Group
from strom.group.txn_offsets import TxnCommitRequest


@dataclass(slots=True)
class Batch:
    write_id: int
    producer_id: int
    records: list[tuple[Key, Value | None]]
    durable: bool = False


@dataclass(slots=True)
class Marker:
    producer_id: int
    commit: bool
    completed: bool = False


class TxnHarness(Harness):
    def __init__(self, seed: int = 1, **config: Any) -> None:
        super().__init__(seed, **config)
        self.seed = seed
        self.log: list[Batch | Marker] = []
        self._unsettled: dict[int, Batch] = {}
        """The live coordinator's write id -> its batch in the log, until durable or failed."""

    def _apply(self, out: Output) -> None:
        if out.records:
            batch = Batch(out.write_id, out.producer_id, list(out.records))
            self.log.append(batch)
            self._unsettled[out.write_id] = batch
        super()._apply(out)

    def complete(self, write_id: int) -> None:
        before = set(self._outputs)
        super().complete(write_id)
        for promoted in before - set(self._outputs):
            batch = self._unsettled.pop(promoted, None)
            if batch is not None:
                batch.durable = True

    def fail(self, write_id: int) -> tuple[int, ...]:
        dropped = super().fail(write_id)
        gone = {id(self._unsettled.pop(each)) for each in dropped if each in self._unsettled}
        self.log = [e for e in self.log if id(e) not in gone]
        return dropped

    def reload(self) -> None:
        """A new leader of the partition: its coordinator, which loaded the durable log,
        is the live one (only between writes: a pending one would be lost with the old)."""
        assert not self.held and not self._unsettled and not self._outputs
        self.core = self.replayed()

    # --- transactions -------------------------------------------------------------------

    def txn_commit(
        self,
        producer_id: int,
        *items: tuple[str, int, int],
        group: str = "g",
        epoch: int = 0,
        generation: int = -1,
        member: str = "",
        instance: str | None = None,
        metadata: str = "txn",
    ) -> list[ErrorCode]:
        request = TxnCommitRequest(
            group,
            producer_id,
            epoch,
            "tx",
            generation,
            member,
            instance,
            tuple(OffsetToCommit(t, p, o, 1, metadata) for t, p, o in items),
        )
        errors, out = txn_offsets.txn_commit(self.core, request, self.now_ms)
        assert out.producer_id == producer_id and out.producer_epoch == epoch
        self._apply(out)
        return errors

    def marker(self, producer_id: int, *, commit: bool, complete: bool = True) -> Marker:
        """The transaction coordinator writes a marker (and, if `complete`, reports it
        durable at once)."""
        written = Marker(producer_id, commit)
        self.log.append(written)
        if complete:
            self.complete_marker(written)
        return written

    def complete_marker(self, marker: Marker) -> list[str]:
        marker.completed = True
        return txn_offsets.end_transaction(
            self.core, marker.producer_id, commit=marker.commit, belongs=lambda _g: True
        )

    def replayed(self) -> GroupCoordinator:
        """A new coordinator (same config) that loaded the durable part of the log."""
        fresh = GroupCoordinator(self.core.config, Random(self.seed))
        for entry in self.log:
            if isinstance(entry, Marker):
                if entry.completed:
                    txn_offsets.end_transaction(
                        fresh, entry.producer_id, commit=entry.commit, belongs=lambda _g: True
                    )
            elif entry.durable:
                for key, value in entry.records:
                    fresh.load(key, value, self.now_ms, entry.producer_id)
        return fresh


def offsets_of(groups: dict[str, Group], group_id: str) -> tuple[Any, Any]:
    """A group's committed offsets and its pending ones (each partition's producers in
    the order they wrote), comparable across coordinators."""
    group = groups.get(group_id)
    if group is None:
        return {}, {}
    pending = {tp: list(by_producer.items()) for tp, by_producer in group.pending_offsets.items()}
    return group.offsets, pending


def assert_matches_replay(h: TxnHarness) -> None:
    """The committed offsets, pending and not, are what loading the log gives."""
    live, replayed = h.core.groups, h.replayed().groups
    for group_id in live.keys() | replayed.keys():
        assert offsets_of(live, group_id) == offsets_of(replayed, group_id), group_id
