"""Committed groups and the writes not yet durable: the mechanism the KIP-848 consumer
group and the KIP-932 share group coordinators share (`consumer/coordinator.py`,
`share/coordinator.py`).

It holds the committed groups (what durable records say), the writes not yet durable
(each a list of records, in the order they were decided), and the tip: the committed
groups with every pending write's records replayed on top, which the next decision
reads. A write's transitions:

    pushed --durable(write_id)--> its records replayed into the committed groups (in
                                  order: a write is durable only after the older ones
                                  of its partition); once no write of its group is
                                  pending, the group's tip is a copy of its committed
                                  state
    pushed --failed(write_id)--> dropped with every later write of the same group (they
                                 were decided on it); the group's tip rebuilt from its
                                 committed state and the writes that remain
    pushed --forget(groups)--> dropped: the coordinator no longer owns the group

Groups change only by the `replay` function of their type, so the tip is always what
replaying the records gives. Timers and answers are the coordinators'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Generic, Protocol, Self, TypeVar

__all__ = ["PendingWrites"]


class _Group(Protocol):
    def copy(self) -> Self: ...


G = TypeVar("G", bound=_Group)
K = TypeVar("K")
V = TypeVar("V")


@dataclass(slots=True)
class _PendingWrite(Generic[K, V]):
    write_id: int
    group_id: str
    records: list[tuple[K, V | None]]
    durable: bool = False


class PendingWrites(Generic[G, K, V]):
    def __init__(
        self,
        replay: Callable[[MutableMapping[str, G], K, V | None], None],
        on_rebuilt: Callable[[G], None] = lambda group: None,
    ) -> None:
        """`on_rebuilt`: told of a group's tip rebuilt after a failed write (whose
        members' removal, say, did not happen and must be tried again)."""
        self._replay = replay
        self._on_rebuilt = on_rebuilt
        self.committed: dict[str, G] = {}
        self.tip: dict[str, G] = {}
        """Group id -> its newest version (pending writes included). Read only."""
        self._pending: list[_PendingWrite[K, V]] = []
        self._next_write_id = 0

    def __len__(self) -> int:
        return len(self._pending)

    def last(self, group_id: str) -> int:
        """The newest pending write of the group, 0 when none is."""
        ids = [p.write_id for p in self._pending if p.group_id == group_id]
        return ids[-1] if ids else 0

    def group_of(self, write_id: int) -> str | None:
        return next((p.group_id for p in self._pending if p.write_id == write_id), None)

    def push(self, group_id: str, records: list[tuple[K, V | None]], group: G | None) -> int:
        """A decision's records and its version of the group (None: deleted); returns
        the write's id."""
        self._next_write_id += 1
        self._pending.append(_PendingWrite(self._next_write_id, group_id, list(records)))
        if group is None:
            self.tip.pop(group_id, None)
        else:
            self.tip[group_id] = group
        return self._next_write_id

    def settle(self, group_id: str) -> None:
        """No write of the group is pending: its tip is a copy of the committed group."""
        group = self.committed.get(group_id)
        if group is None:
            self.tip.pop(group_id, None)
        else:
            self.tip[group_id] = group.copy()

    def durable(self, write_id: int) -> None:
        for pending in self._pending:
            if pending.write_id == write_id:
                pending.durable = True
        while self._pending and self._pending[0].durable:
            done = self._pending.pop(0)
            for key, value in done.records:
                self._replay(self.committed, key, value)
            if not any(p.group_id == done.group_id for p in self._pending):
                self.settle(done.group_id)

    def failed(self, write_id: int) -> list[int]:
        """Drop the write and the later writes of its group; returns their ids."""
        group_id = self.group_of(write_id)
        if group_id is None:
            return []
        dropped = [
            p.write_id for p in self._pending if p.group_id == group_id and p.write_id >= write_id
        ]
        self._pending = [p for p in self._pending if p.write_id not in dropped]
        self._rebuild(group_id)
        return dropped

    def _rebuild(self, group_id: str) -> None:
        base = self.committed.get(group_id)
        groups: dict[str, G] = {group_id: base.copy()} if base is not None else {}
        for pending in self._pending:
            if pending.group_id == group_id:
                for key, value in pending.records:
                    self._replay(groups, key, value)
        if group_id in groups:
            self.tip[group_id] = groups[group_id]
            self._on_rebuilt(groups[group_id])
        else:
            self.tip.pop(group_id, None)

    def forget(self, group_ids: Iterable[str]) -> list[int]:
        """Drop these groups and their pending writes; returns the writes' ids."""
        gone = set(group_ids)
        dropped = [p.write_id for p in self._pending if p.group_id in gone]
        self._pending = [p for p in self._pending if p.group_id not in gone]
        for group_id in gone:
            self.committed.pop(group_id, None)
            self.tip.pop(group_id, None)
        return dropped
