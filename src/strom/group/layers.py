"""The groups of a coordinator: committed state plus pending, not yet durable, writes.

Every decision of the coordinator runs on its own copies of the groups it touches (the
view it reads is the committed groups under every pending layer) and ends as a layer:
the records it wrote, its versions of those groups (after replaying its records into
them) and the requests it answered. A layer's transitions:

    pushed --durable(write_id)--> durable
    durable --every older layer touching one of its groups is gone--> promoted: its
        versions become the committed groups; its replies may go out
    pushed | durable --failed(write_id)--> discarded, together with every later layer
        touching a group a discarded layer touched (it was decided on the discarded state)

A layer without records is durable as soon as the shell says so (at once), but is
promoted only after the older layers of its groups, like Kafka's coordinator runtime
answers a write without records only once the writes before it are committed.
Committed groups change only here: by promotion of durable layers, by `replay` at load
(`load`), or by a transaction's marker (`end_transaction`). A marker is written by the
transaction coordinator, not by a decision here, so it is no layer: once it is durable it
is applied to the committed groups and to every pending layer's version of them alike.
Whichever of those versions ends up committed then holds it, as replaying the log does
(a marker commutes with the records around it: which commit of a partition wins is
decided by the order the commits were written, not by when the marker came). Nothing
here knows a clock or a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from strom.group.records import Key, Value
from strom.group.replay import NO_PRODUCER_ID, end_transaction, replay
from strom.group.state import Group, Token

__all__ = ["Discarded", "GroupStore", "Layer"]

GroupRecord = tuple[Key, Value | None]


@dataclass(slots=True)
class Layer:
    write_id: int
    records: list[GroupRecord]
    changes: dict[str, Group | None]
    """Group id -> this write's version of the group (None: the group is gone)."""
    answered: set[Token] = field(default_factory=set)
    durable: bool = False


@dataclass(frozen=True, slots=True)
class Discarded:
    """What a failed write undid: its layer and the later ones decided on top of it, and
    the waiting requests that only those layers answered or held (the shell fails them;
    requests still waiting in the restored state keep waiting)."""

    write_ids: tuple[int, ...] = ()
    tokens: frozenset[Token] = frozenset()


class GroupStore:
    def __init__(self) -> None:
        self.committed: dict[str, Group] = {}
        self._layers: list[Layer] = []
        self._work: dict[str, Group | None] | None = None
        self._next_write_id = 0

    # --- the view a decision reads ------------------------------------------------------

    def peek(self, group_id: str) -> Group | None:
        """The newest version of a group (the decision's own, a pending one, or committed).
        Read it only; change a group through `get`."""
        if self._work is not None and group_id in self._work:
            return self._work[group_id]
        for layer in reversed(self._layers):
            if group_id in layer.changes:
                return layer.changes[group_id]
        return self.committed.get(group_id)

    def group_ids(self) -> list[str]:
        ids = dict.fromkeys(self.committed)
        for layer in self._layers:
            ids.update(dict.fromkeys(layer.changes))
        if self._work is not None:
            ids.update(dict.fromkeys(self._work))
        return [group_id for group_id in ids if self.peek(group_id) is not None]

    def view(self) -> Iterator[Group]:
        for group_id in self.group_ids():
            group = self.peek(group_id)
            if group is not None:
                yield group

    @property
    def pending(self) -> int:
        return len(self._layers)

    # --- one decision -------------------------------------------------------------------

    def begin(self) -> None:
        assert self._work is None, "a decision is already running"
        self._work = {}

    def abort(self) -> None:
        """The decision raised: forget its copies."""
        self._work = None

    def get(self, group_id: str) -> Group | None:
        """The running decision's own copy of a group, made on first use."""
        work = self._work
        assert work is not None, "no decision is running"
        if group_id not in work:
            group = self.peek(group_id)
            work[group_id] = group.copy() if group is not None else None
        return work[group_id]

    def put(self, group: Group) -> None:
        assert self._work is not None, "no decision is running"
        self._work[group.group_id] = group

    def drop(self, group_id: str) -> None:
        assert self._work is not None, "no decision is running"
        self._work[group_id] = None

    def finish(
        self,
        records: list[GroupRecord],
        answered: Iterable[Token],
        now_ms: int,
        producer_id: int = NO_PRODUCER_ID,
    ) -> int:
        """End the decision: replay its records (of a transactional batch of
        `producer_id`, if one is given) into its copies; push it as a layer."""
        for key, _ in records:
            self.get(key.group_id)
        work = self._work
        assert work is not None
        self._work = None
        scratch = {group_id: group for group_id, group in work.items() if group is not None}
        copied: set[str] = set()
        for key, value in records:
            group = scratch.get(key.group_id)
            if group is not None and key.group_id not in copied:
                group.own_offsets()  # copies share them until now
                copied.add(key.group_id)
            replay(scratch, key, value, now_ms, loading=False, producer_id=producer_id)
        changes = {group_id: scratch.get(group_id) for group_id in work.keys() | scratch.keys()}
        self._next_write_id += 1
        self._layers.append(Layer(self._next_write_id, records, changes, set(answered)))
        return self._next_write_id

    # --- transaction markers ------------------------------------------------------------

    def end_transaction(
        self, producer_id: int, *, commit: bool, belongs: Callable[[str], bool]
    ) -> list[str]:
        """The marker of `producer_id` is durable where the groups `belongs` selects live:
        apply it to their committed and pending versions; returns the groups it changed."""
        assert self._work is None, "a decision is running"
        ended: set[str] = set()
        versions: list[Iterable[Group | None]] = [self.committed.values()]
        versions += [layer.changes.values() for layer in self._layers]
        for each in versions:
            for group in each:
                if (
                    group is not None
                    and belongs(group.group_id)
                    and end_transaction(group, producer_id, commit=commit)
                ):
                    ended.add(group.group_id)
        return sorted(ended)

    # --- the shell reports --------------------------------------------------------------

    def durable(self, write_id: int) -> list[int]:
        """The write's records are durable: returns the layers promoted now, oldest first."""
        for layer in self._layers:
            if layer.write_id == write_id:
                layer.durable = True
        promoted: list[int] = []
        blocked: set[str] = set()
        kept: list[Layer] = []
        for layer in self._layers:
            if layer.durable and not blocked.intersection(layer.changes):
                for group_id, group in layer.changes.items():
                    if group is None:
                        self.committed.pop(group_id, None)
                    else:
                        self.committed[group_id] = group
                promoted.append(layer.write_id)
            else:
                blocked.update(layer.changes)
                kept.append(layer)
        self._layers = kept
        return promoted

    def failed(self, write_id: int) -> Discarded:
        """The write failed: discard its layer and every later layer that depends on it."""
        index = next((i for i, x in enumerate(self._layers) if x.write_id == write_id), None)
        if index is None:
            return Discarded()
        doomed = set(self._layers[index].changes)
        dropped = [self._layers[index]]
        kept = self._layers[:index]
        for layer in self._layers[index + 1 :]:
            if doomed.intersection(layer.changes):
                doomed.update(layer.changes)
                dropped.append(layer)
            else:
                kept.append(layer)
        self._layers = kept
        held: set[Token] = set()
        for layer in dropped:
            held |= layer.answered
            for group in layer.changes.values():
                if group is not None:
                    held |= group.parked_tokens()
        for group_id in doomed:
            group = self.peek(group_id)
            if group is not None:
                held -= group.parked_tokens()
        return Discarded(tuple(layer.write_id for layer in dropped), frozenset(held))

    def forget(self, group_ids: Iterable[str]) -> Discarded:
        """Drop groups this coordinator no longer owns, with their pending layers."""
        gone = set(group_ids)
        write_ids: list[int] = []
        tokens: set[Token] = set()
        while True:
            layer = next((x for x in self._layers if gone.intersection(x.changes)), None)
            if layer is None:
                break
            undone = self.failed(layer.write_id)
            write_ids += undone.write_ids
            tokens |= undone.tokens
        for group_id in gone:
            group = self.committed.pop(group_id, None)
            if group is not None:
                tokens |= group.parked_tokens()
        return Discarded(tuple(write_ids), frozenset(tokens))
