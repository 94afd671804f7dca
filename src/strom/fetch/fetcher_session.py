"""A fetcher's side of one fetch session (KIP-227) with one broker: what each fetch
sends, and what an answer means for the next one.

The first fetch is full (session id 0, epoch 0) and names every partition wanted; the
broker's answer brings a session id. Each later fetch sends only the partitions added or
altered since the one before (fetch offset, leader epochs, log start or size limit) and
forgets those no longer wanted. Anything unexpected (an error, a partition the session
does not hold, no answer at all) sends the next fetch in full again.

    full (id 0 or S, epoch 0) --answer with session S'--> incremental (S', 1)
    incremental (S, e) --answer--> incremental (S, e + 1)
    any --error, unknown partition, no answer--> full, closing S (id S, epoch 0)
    any --FETCH_SESSION_ID_NOT_FOUND, or an answer with session id 0--> full (0, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.fetch.sessions import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    PartitionFetch,
    PartitionKey,
    next_epoch,
)


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """What one fetch request carries."""

    session_id: int
    epoch: int
    to_send: tuple[PartitionFetch, ...]
    to_forget: tuple[PartitionKey, ...]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetcherSession:
    """The session of one fetcher with one broker."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._held: dict[PartitionKey, PartitionFetch] = {}
        """What the broker's session holds once the last plan is answered."""
        self._full = True

    def plan(self, wanted: Mapping[PartitionKey, PartitionFetch]) -> FetchPlan:
        """The next fetch, for exactly the partitions in `wanted`."""
        self._full = self.epoch == INITIAL_EPOCH
        if self._full:
            to_send = tuple(wanted.values())
            to_forget: tuple[PartitionKey, ...] = ()
        else:
            to_send = tuple(f for key, f in wanted.items() if self._held.get(key) != f)
            to_forget = tuple(key for key in self._held if key not in wanted)
        self._held = dict(wanted)
        return FetchPlan(self.session_id, self.epoch, to_send, to_forget)

    def answered(self, error: ErrorCode, session_id: int, keys: Iterable[PartitionKey]) -> bool:
        """An answer to the last plan arrived: True when its partitions may be used."""
        if error != ErrorCode.none:
            if error == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        if any(key not in self._held for key in keys):
            self.epoch = INITIAL_EPOCH  # not what was asked: start over, closing the session
            return False
        if session_id == INVALID_SESSION_ID:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif self._full:
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def failed(self) -> None:
        """The last plan got no answer (connection lost, timeout): start over in full."""
        self.epoch = INITIAL_EPOCH
