"""Incremental fetch sessions (KIP-227), the broker's side: which partitions each session
fetches, and which of them an answer must carry.

A fetcher that sends session id 0 and epoch 0 (a full fetch) asks for a session and gets
its id back. From then on it sends only what changed (partitions added or altered, and
partitions to forget) under an epoch that goes up by one each time. The broker answers
with only the partitions that have something new: records, a moved high watermark, last
stable offset or log start, an error, or a diverging epoch. A fetcher with many quiet
partitions sends and receives a few bytes instead of every partition on every fetch.

    (session id, epoch) of a request     what the broker does
    (0, -1)                              a full fetch, no session (what clients without
                                         KIP-227 send)
    (0 or S, 0)                          closes S, answers in full and opens a new session
    (S, -1)                              closes S, answers in full, no session
    (S, e)                               S's next fetch if e is S's epoch, or
                                         INVALID_FETCH_SESSION_EPOCH; no S:
                                         FETCH_SESSION_ID_NOT_FOUND

A session's legal transitions:

    opened (epoch 1) --incremental fetch at its epoch--> epoch + 1 (2^31-1 wraps to 1)
    any --a full fetch naming it | every partition forgotten | evicted--> gone

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. A new one
takes the place of a session unused for two minutes, else, as in Kafka, of the least
valuable session old enough to evict: followers' sessions are worth more than
consumers', bigger ones more than smaller ones. When no place can be made, the fetch is
answered in full without a session, and the fetcher tries again with its next fetch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from random import Random

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
EVICTION_MS = 120_000
"""A session unused this long may be evicted; one younger may be only by a more valuable
one (Kafka's min.incremental.fetch.session.eviction.ms)."""

TopicRef = str | uuid.UUID
"""A topic as a fetch names it: by name before Fetch v13, by topic id from v13 on."""
PartitionKey = tuple[TopicRef, int]


def next_epoch(epoch: int) -> int:
    """The epoch that follows `epoch` in a session."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition as a fetch request names it."""

    topic: TopicRef
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    """A follower's own log start; -1 from a consumer."""

    @property
    def key(self) -> PartitionKey:
        return (self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What a fetch request says about its session."""

    session_id: int
    epoch: int
    uses_topic_ids: bool
    """Fetch v13 or later: partitions are named by topic id."""
    follower: bool
    partitions: tuple[PartitionFetch, ...]
    forgotten: tuple[PartitionKey, ...] = ()

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """What an answer says of one partition, as far as a session compares it."""

    error: int
    """An ErrorCode; 0 for none."""
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    has_records: bool = False
    diverging: bool = False


@dataclass(slots=True)
class CachedPartition:
    """A partition of a session: the fetch it last asked for, and what it was last told."""

    fetch: PartitionFetch
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_answer(self, answer: PartitionAnswer) -> bool:
        """Whether an incremental answer carries this partition; remembers what it tells."""
        must = answer.has_records or answer.diverging
        if answer.high_watermark != self.high_watermark:
            self.high_watermark = answer.high_watermark
            must = True
        if answer.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = answer.last_stable_offset
            must = True
        if answer.log_start_offset != self.log_start_offset:
            self.log_start_offset = answer.log_start_offset
            must = True
        if answer.error:
            self.high_watermark = -1  # so the partition is sent again once the error clears
            must = True
        return must


@dataclass(slots=True)
class FetchSession:
    """One session: its partitions in the order they are read (those just answered go
    last, so a response's size limit does not favour the same partitions every time)."""

    session_id: int
    follower: bool
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    """The epoch its next fetch must carry."""
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def update(
        self, partitions: tuple[PartitionFetch, ...], forgotten: tuple[PartitionKey, ...]
    ) -> None:
        for fetch in partitions:
            cached = self.partitions.get(fetch.key)
            if cached is None:
                self.partitions[fetch.key] = CachedPartition(fetch)
            else:
                cached.fetch = fetch
        for key in forgotten:
            self.partitions.pop(key, None)

    def answered(self, key: PartitionKey, answer: PartitionAnswer, incremental: bool) -> bool:
        """Note what the answer tells of a partition; whether the answer carries it."""
        cached = self.partitions.get(key)
        if cached is None:
            return True
        must = cached.must_answer(answer)
        if must and incremental:
            del self.partitions[key]
            self.partitions[key] = cached
        return must or not incremental


class SessionKind(Enum):
    SESSIONLESS = "sessionless"
    """Answer every partition the request names; no session."""
    FULL = "full"
    """Answer every partition the request names; a new session, if one could be made."""
    INCREMENTAL = "incremental"
    """Read every partition of the session; answer those with something new."""
    REFUSED = "refused"
    """Answer only the error."""


@dataclass(frozen=True, slots=True)
class SessionContext:
    """How one fetch is served: what to read, and what its answer carries."""

    kind: SessionKind
    fetches: tuple[PartitionFetch, ...] = ()
    session: FetchSession | None = None
    error: ErrorCode = ErrorCode.none

    @property
    def session_id(self) -> int:
        """The session id the answer carries."""
        return self.session.session_id if self.session is not None else INVALID_SESSION_ID

    def carries(self, fetch: PartitionFetch, answer: PartitionAnswer) -> bool:
        """Whether the answer carries this partition (and the session remembers it)."""
        if self.session is None:
            return True
        return self.session.answered(
            fetch.key, answer, incremental=self.kind is SessionKind.INCREMENTAL
        )


class FetchSessionCache:
    """Every session of one broker, at most `max_slots` of them."""

    def __init__(self, max_slots: int, rng: Random, eviction_ms: int = EVICTION_MS) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        """Sessions evicted to make place for new ones, since start."""

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def partitions(self) -> int:
        """Partitions held over all sessions."""
        return sum(len(s.partitions) for s in self._sessions.values())

    def open(self, request: SessionRequest, now_ms: int) -> SessionContext:
        """How to serve this fetch (see the table at the top)."""
        if request.full:
            if request.session_id != INVALID_SESSION_ID:
                self._sessions.pop(request.session_id, None)
            if request.epoch == FINAL_EPOCH:
                return SessionContext(SessionKind.SESSIONLESS, request.partitions)
            session = self._create(request, now_ms)
            return SessionContext(SessionKind.FULL, request.partitions, session)
        session = self._sessions.get(request.session_id)
        if session is None:
            return SessionContext(SessionKind.REFUSED, error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != request.epoch:
            return SessionContext(SessionKind.REFUSED, error=ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != request.uses_topic_ids:
            return SessionContext(SessionKind.REFUSED, error=ErrorCode.fetch_session_topic_id_error)
        session.update(request.partitions, request.forgotten)
        if not session.partitions:
            del self._sessions[session.session_id]
            return SessionContext(SessionKind.SESSIONLESS)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now_ms
        fetches = tuple(cached.fetch for cached in session.partitions.values())
        return SessionContext(SessionKind.INCREMENTAL, fetches, session)

    def _create(self, request: SessionRequest, now_ms: int) -> FetchSession | None:
        if len(self._sessions) >= self.max_slots and not self._evict_for(
            request.follower, len(request.partitions), now_ms
        ):
            return None
        session_id = self._rng.randint(1, MAX_EPOCH)
        while session_id in self._sessions:
            session_id = self._rng.randint(1, MAX_EPOCH)
        session = FetchSession(session_id, request.follower, request.uses_topic_ids, now_ms, now_ms)
        session.update(request.partitions, ())
        self._sessions[session_id] = session
        return session

    def _evict_for(self, follower: bool, size: int, now_ms: int) -> bool:
        """Make place for a new session; False when none may go."""
        if not self._sessions:
            return False
        stalest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.session_id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self._evict(stalest)
            return True
        candidates = [
            s
            for s in self._sessions.values()
            if now_ms - s.created_ms > self.eviction_ms or (follower and not s.follower)
        ]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.follower, len(s.partitions), s.session_id))
        if (follower, size) <= (least.follower, len(least.partitions)):
            return False
        self._evict(least)
        return True

    def _evict(self, session: FetchSession) -> None:
        del self._sessions[session.session_id]
        self.evictions += 1
