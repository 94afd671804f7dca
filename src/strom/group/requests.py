"""What the classic group coordinator takes and gives: request values, and the `Output`
of every decision (replies for waiting requests, `__consumer_offsets` records to write,
the write id the shell reports durable or failed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.group.records import Key, Value
from strom.group.state import JoinResult, SyncResult, Token

__all__ = [
    "GroupRecord",
    "JoinRequest",
    "LeavingMember",
    "Output",
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


@dataclass(slots=True)
class Output:
    """One decision: its records, the replies to send once they are durable, and the id
    the shell reports back with (`GroupCoordinator.durable` / `failed`)."""

    replies: list[tuple[Token, Reply]] = field(default_factory=list)
    records: list[GroupRecord] = field(default_factory=list)
    write_id: int = 0

    def reply(self, token: Token | None, result: Reply) -> None:
        if token is not None:
            self.replies.append((token, result))

    def extend(self, other: Output) -> None:
        self.replies += other.replies
        self.records += other.records
