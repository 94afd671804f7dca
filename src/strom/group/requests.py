"""What the classic group coordinator takes and gives: request values, the `Output`
of every decision (replies for waiting requests, `__consumer_offsets` records to write,
the write id the shell reports durable or failed), and the `RebalanceResult` of a forced
rebalance."""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from strom.group.records import Key, Value
from strom.group.state import GroupState, JoinResult, SyncResult, Token

__all__ = [
    "GroupRecord",
    "JoinRequest",
    "LeavingMember",
    "Output",
    "RebalanceResult",
    "Reply",
    "SyncRequest",
]

Reply = JoinResult | SyncResult
GroupRecord = tuple[Key, Value | None]


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = True
    """JoinGroup v4+: a new dynamic member first gets MEMBER_ID_REQUIRED and its id."""
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class RebalanceResult:
    """What a forced rebalance (`GroupCoordinator.rebalance`) did.

    `started`: the group went from Stable or CompletingRebalance to PreparingRebalance.
    Otherwise `error` says why nothing was done: GROUP_ID_NOT_FOUND (no such group, or a
    Dead one), or NONE with `state` Empty (no member to rebalance) or PreparingRebalance
    (a rebalance is already under way). The shell adds the errors of coordination
    (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a failed write)."""

    error: ErrorCode
    started: bool = False
    state: GroupState | None = None
    """The group's state when asked; None when there is no such group."""


@dataclass(slots=True)
class Output:
    """One decision: its records, the replies to send once they are durable, and the id
    the shell reports back with (`GroupCoordinator.durable` / `failed`)."""

    replies: list[tuple[Token, Reply]] = field(default_factory=list)
    records: list[GroupRecord] = field(default_factory=list)
    write_id: int = 0
    producer_id: int = -1
    """A TxnOffsetCommit's: the records go in one transactional batch of this producer."""
    producer_epoch: int = -1

    def reply(self, token: Token | None, result: Reply) -> None:
        if token is not None:
            self.replies.append((token, result))

    @property
    def transactional(self) -> bool:
        return self.producer_id >= 0

    def extend(self, other: Output) -> None:
        assert not other.transactional, "a transactional write is a decision of its own"
        self.replies += other.replies
        self.records += other.records
