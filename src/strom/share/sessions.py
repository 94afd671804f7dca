"""Share sessions (KIP-932): which share-partitions a member's ShareFetch reads, and the
epoch that orders its requests. Kafka's ShareSessionCache and ShareFetchContext rules.

A session is keyed by (group id, member id). Its epoch is the one the member must send
next; the broker moves it on after each accepted request:

    no session  -- ShareFetch epoch 0 -----------------> open, epoch 1 (a full fetch:
                                                         the request's partitions)
    open        -- ShareFetch epoch 0 -----------------> replaced by a new one
    open        -- ShareFetch/ShareAcknowledge epoch e -> epoch next(e), when e is the
                                                         session's; the fetch reads every
                                                         partition of the session, grown
                                                         by the request's topics and shrunk
                                                         by its forgotten_topics_data
    open        -- ShareFetch/ShareAcknowledge epoch -1 > closed once the request's
                                                         acknowledgements are done: the
                                                         member's acquired records go back
    open        -- the connection that opened it closes -> closed the same way

A session belongs to the connection whose epoch-0 fetch opened it, as Kafka's does (its
connection id comes from the broker's connection, never from the request): later
requests may come on other connections without moving it. When that connection closes,
`disconnected` ends its sessions and names the members whose records go back. A member
that opens a new session at epoch 0 on another connection ties the new session to that
one; the old connection's close then leaves it alone. Kafka maps a connection to the
last session opened on it only; strom ends every session a connection opened (one, for
any client that runs one member per connection).

Refusals, with Kafka's codes: SHARE_SESSION_NOT_FOUND (an epoch other than 0 with no
session), INVALID_SHARE_SESSION_EPOCH (the wrong epoch; ShareAcknowledge with 0),
SHARE_SESSION_LIMIT_REACHED (a new session past `group.share.max.share.sessions`),
INVALID_REQUEST (acknowledgements in a fetch that opens a session). Pure: no I/O.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "ShareFetchContext",
    "ShareMemberKey",
    "ShareSession",
    "ShareSessionCache",
    "ShareSessionKind",
    "TopicIdPartition",
    "next_epoch",
]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF

TopicIdPartition = tuple[uuid.UUID, int]
ShareMemberKey = tuple[str, str]
"""(group id, member id): a session's key, and whose records a session's end gives back."""


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's ShareRequestMetadata.nextEpoch): 1 after the
    largest, and the final epoch stays final."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == _MAX_EPOCH:
        return 1
    return epoch + 1


class ShareSessionKind(enum.Enum):
    FULL = "full"
    """Epoch 0: a new session; the fetch reads the request's partitions."""
    SUBSEQUENT = "subsequent"
    """The session's next epoch: the fetch reads every partition of the session."""
    FINAL = "final"
    """Epoch -1: acknowledgements only; then the session closes."""
    REFUSED = "refused"


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    """The epoch the member must send next."""
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)
    """In fetch order (an ordered set): a partition that answered records moves last,
    so that a fetch bounded by max_bytes or max_records serves every partition in turn."""
    connection_id: str = ""
    """The connection whose epoch-0 fetch opened the session ("": none, it never ends
    by a connection closing)."""
    last_used_ms: int = 0


@dataclass(frozen=True, slots=True)
class ShareFetchContext:
    """What one ShareFetch may do, as its session says."""

    kind: ShareSessionKind
    error: ErrorCode = ErrorCode.none
    partitions: tuple[TopicIdPartition, ...] = ()
    """What the fetch reads (nothing for FINAL and REFUSED)."""

    @property
    def carries_all(self) -> bool:
        """A full fetch's answer names every partition it read; a subsequent one's only
        those with records, an error or an acknowledgement result (Kafka's
        ShareSessionContext)."""
        return self.kind is ShareSessionKind.FULL


class ShareSessionCache:
    """The share sessions of this broker, at most `max_sessions` of them."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[ShareMemberKey, ShareSession] = {}
        self._by_connection: dict[str, dict[ShareMemberKey, None]] = {}
        """The sessions each connection opened (Kafka's connectionIdToSessionMap)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def fetch(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        partitions: Iterable[TopicIdPartition],
        forgotten: Iterable[TopicIdPartition],
        *,
        has_acknowledgements: bool,
        connection_id: str,
        now_ms: int,
    ) -> ShareFetchContext:
        """A ShareFetch at `epoch` naming `partitions` and forgetting `forgotten` (Kafka's
        SharePartitionManager.newContext)."""
        key = (group_id, member_id)
        session = self._sessions.get(key)
        if epoch == FINAL_EPOCH:
            if session is None:
                return ShareFetchContext(
                    ShareSessionKind.REFUSED, ErrorCode.share_session_not_found
                )
            session.last_used_ms = now_ms
            return ShareFetchContext(ShareSessionKind.FINAL)
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                return ShareFetchContext(ShareSessionKind.REFUSED, ErrorCode.invalid_request)
            self._remove(key)
            if len(self._sessions) >= self.max_sessions:
                return ShareFetchContext(
                    ShareSessionKind.REFUSED, ErrorCode.share_session_limit_reached
                )
            wanted = dict.fromkeys(partitions)
            self._sessions[key] = ShareSession(
                group_id, member_id, next_epoch(INITIAL_EPOCH), wanted, connection_id, now_ms
            )
            if connection_id:
                self._by_connection.setdefault(connection_id, {})[key] = None
            return ShareFetchContext(ShareSessionKind.FULL, partitions=tuple(wanted))
        if session is None:
            return ShareFetchContext(ShareSessionKind.REFUSED, ErrorCode.share_session_not_found)
        if epoch != session.epoch:
            return ShareFetchContext(
                ShareSessionKind.REFUSED, ErrorCode.invalid_share_session_epoch
            )
        for added in partitions:
            session.partitions.setdefault(added, None)
        for gone in forgotten:
            session.partitions.pop(gone, None)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        return ShareFetchContext(ShareSessionKind.SUBSEQUENT, partitions=tuple(session.partitions))

    def acknowledge(self, group_id: str, member_id: str, epoch: int, now_ms: int) -> ErrorCode:
        """A ShareAcknowledge at `epoch` (Kafka's acknowledgeSessionUpdate): NONE, and the
        session moves on (or, at -1, is closed by `close` once the acknowledgements are
        done)."""
        if epoch == INITIAL_EPOCH:
            return ErrorCode.invalid_share_session_epoch
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.share_session_not_found
        session.last_used_ms = now_ms
        if epoch == FINAL_EPOCH:
            return ErrorCode.none
        if epoch != session.epoch:
            return ErrorCode.invalid_share_session_epoch
        session.epoch = next_epoch(session.epoch)
        return ErrorCode.none

    def answered(
        self, group_id: str, member_id: str, with_records: Iterable[TopicIdPartition]
    ) -> None:
        """The partitions that answered records move to the end of the fetch order."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return
        for key in with_records:
            if key in session.partitions:
                del session.partitions[key]
                session.partitions[key] = None

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        """End the session (epoch -1 done); the caller releases the member's records."""
        return self._remove((group_id, member_id))

    def disconnected(self, connection_id: str) -> list[ShareMemberKey]:
        """A connection closed: the sessions it opened end (Kafka's
        connectionDisconnectListener), and each member named here gets its records back
        (as a member leaving does)."""
        keys = list(self._by_connection.pop(connection_id, {})) if connection_id else []
        for key in keys:
            self._sessions.pop(key, None)
        return keys

    def _remove(self, key: ShareMemberKey) -> ShareSession | None:
        session = self._sessions.pop(key, None)
        if session is not None and session.connection_id:
            opened = self._by_connection.get(session.connection_id)
            if opened is not None:
                opened.pop(key, None)
                if not opened:
                    del self._by_connection[session.connection_id]
        return session

    def connections(self) -> int:
        """How many connections have sessions open (for the tests: none is kept after
        its last session ends)."""
        return len(self._by_connection)
