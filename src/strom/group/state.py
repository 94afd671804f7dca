"""The state of one classic consumer group and the values its coordinator hands out.

A group moves between five states (Kafka's names):

    Empty -------------> PreparingRebalance   a member joins
    PreparingRebalance -> CompletingRebalance  every member rejoined, or the rebalance timed out
    PreparingRebalance -> Empty                nobody rejoined
    CompletingRebalance -> Stable              the leader sent the assignment
    CompletingRebalance -> PreparingRebalance  a member joined, left or died meanwhile, or
                                               the broker forced a rebalance
    Stable ------------> PreparingRebalance    a member joined, left, died or changed, or
                                               the broker forced a rebalance
    any ---------------> Dead                  deleted, expired, or its partition moved away

`_TRANSITIONS` below is the same table; `Group.transition` refuses anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum

from kio.schema.errors import ErrorCode

from strom.group.consumer_protocol import subscription_topics
from strom.group.records import GroupMetadataValue, MemberRecord, OffsetCommitValue

Token = int
"""The shell's handle for a request whose reply the coordinator may give later."""


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings a coordinator needs (Kafka's keys, in milliseconds)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offset_metadata_max_bytes: int = 4096
    max_group_size: int = 2**31 - 1


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset a TxnOffsetCommit wrote, waiting for its producer's COMMIT or ABORT.

    `superseded`: a commit of the same partition was written after it and already took
    effect (a plain OffsetCommit, or another producer's transaction that committed), so
    its COMMIT marker leaves the committed offset as it is: the newest write wins, as
    Kafka decides by comparing record offsets."""

    value: OffsetCommitValue
    superseded: bool = False


@dataclass(slots=True, eq=False)
class Member:
    """One member of a group. `join_token`/`sync_token` hold a waiting request."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    heartbeat_deadline_ms: int
    assignment: bytes = b""
    join_token: Token | None = None
    sync_token: Token | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    @property
    def protocol_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.protocols)

    @property
    def is_waiting(self) -> bool:
        """A member blocked in JoinGroup or SyncGroup cannot heartbeat; it is not expired."""
        return self.join_token is not None or self.sync_token is not None

    def to_record(self, protocol: str | None) -> MemberRecord:
        return MemberRecord(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.metadata_for(protocol),
            self.assignment,
        )


@dataclass(slots=True, eq=False)
class Group:
    group_id: str
    state: GroupState
    state_timestamp_ms: int
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id."""
    pending_members: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED -> the deadline to rejoin by."""
    rebalance_deadline_ms: int | None = None
    initial_delay_deadline_ms: int | None = None
    initial_delay_remaining_ms: int = 0
    new_member_during_delay: bool = False
    offsets: dict[TopicPartition, OffsetCommitValue] = field(default_factory=dict)
    pending_offsets: dict[TopicPartition, dict[int, PendingOffset]] = field(default_factory=dict)
    """Transactional offsets awaiting their marker: partition -> producer id -> offset,
    each partition's producers in the order their offsets were written."""

    def copy(self) -> Group:
        """A copy a decision may change without touching this one. The offsets and the
        pending offsets are shared: only `replay` and `end_transaction` change them, and
        they copy them first (`own_offsets`)."""
        return replace(
            self,
            members={member_id: replace(m) for member_id, m in self.members.items()},
            static_members=dict(self.static_members),
            pending_members=dict(self.pending_members),
        )

    def own_offsets(self) -> None:
        """Give this version of the group its own offsets and pending offsets (copies
        share them until one of them changes its offsets)."""
        self.offsets = dict(self.offsets)
        self.pending_offsets = {tp: dict(each) for tp, each in self.pending_offsets.items()}

    def parked_tokens(self) -> set[Token]:
        """The waiting JoinGroup/SyncGroup requests this version of the group holds."""
        tokens: set[Token] = set()
        for member in self.members.values():
            for token in (member.join_token, member.sync_token):
                if token is not None:
                    tokens.add(token)
        return tokens

    def transition(self, target: GroupState, now_ms: int) -> None:
        if target not in _TRANSITIONS[self.state] and target is not self.state:
            raise AssertionError(
                f"group {self.group_id!r}: illegal transition {self.state.value} -> {target.value}"
            )
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_static_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """Another member now holds `instance_id`: this one was replaced."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def supported_protocols(self) -> set[str]:
        """Protocols every member supports (any protocol when the group has none)."""
        names: set[str] | None = None
        for member in self.members.values():
            mine = set(member.protocol_names)
            names = mine if names is None else names & mine
        return names if names is not None else set()

    def accepts(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return self.protocol_type in (None, protocol_type) or self.state is GroupState.EMPTY
        if protocol_type != self.protocol_type:
            return False
        return bool(self.supported_protocols() & {name for name, _ in protocols})

    def select_protocol(self) -> str:
        """The protocol all members support that most of them prefer."""
        candidates = self.supported_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name in member.protocol_names if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values())).protocol_names
        return max(sorted(votes, key=first.index), key=lambda name: votes[name])

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to (consumer protocol); None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            found = subscription_topics(member.metadata_for(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return frozenset(topics)

    def to_record(self) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(m.to_record(self.protocol_name) for m in self.members.values()),
        )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


def describe(group: Group) -> GroupDescription:
    members = tuple(
        MemberDescription(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata_for(group.protocol_name),
            m.assignment if group.state is GroupState.STABLE else b"",
        )
        for m in group.members.values()
    )
    stable = group.state is GroupState.STABLE
    protocol = (group.protocol_name or "") if stable else ""
    return GroupDescription(
        group.group_id, group.state, group.protocol_type or "", protocol, members
    )
