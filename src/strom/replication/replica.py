"""One partition replica's replication decisions: a pure core, no I/O, no clock.

    offline --apply(leader: this node)--> leader --apply(leader: another)--> follower
    follower --apply(leader: this node)--> leader         any --apply(no leader)--> offline
    leader --apply(same leader epoch, newer partition epoch)--> leader (replicas, ISR)

`Replica` owns what the metadata says of the partition (leader, leader epoch, partition
epoch, replicas, ISR, min.insync.replicas), the high watermark, the followers' progress
while it leads (`LeaderState`), the ISR changes it proposes, min-ISR admission and where
it truncates as a follower. It answers every input with effects, which the shell's one
owner of the partition carries out in order:

- `StartEpoch`: record that the new leader epoch starts at the log end;
- `Follow`: fetch from this leader at this epoch (after truncating where they diverge);
- `Commit`: the high watermark moved: release acks=all waiters and long polls below it;
- `FailWaiters`: leadership moved away: what still waits was not committed here;
- `ProposeIsr`: send this ISR change to the controller (AlterPartition);
- `Truncate`: cut the log (and its epochs starting at or past the offset) there.

Inputs that carry offsets say which end they mean: `log_end` (what the log holds) and
`durable_end` (what it may count as held: fsynced, where the topic asks for fsync before
acknowledging). A leader counts its own records up to its durable end, as it counts a
follower's up to the follower's fetch offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from kio.schema.errors import ErrorCode

from strom.replication.admission import Refusals
from strom.replication.follower import truncation_offset
from strom.replication.leader import LeaderState

ISR_RETRY_MS = 500
"""After a refused (or unanswered) ISR change, how long before the next proposal."""

NOT_APPLIED = frozenset({ErrorCode.operation_not_attempted, ErrorCode.ineligible_replica})
"""AlterPartition errors that say the change was certainly not made: only after these may
a leader forget its proposal. After any other (a stale partition epoch, a newer leader
epoch) or no answer at all, the controller may have committed it (an earlier attempt
whose answer was lost), so the proposed ISR keeps counting for the high watermark until
the metadata says what the ISR is (KIP-497)."""

EndOffsetFor = Callable[[int], tuple[int, int]]


class Role(Enum):
    OFFLINE = "offline"
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the metadata says of the partition."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_insync_replicas: int = 1


@dataclass(frozen=True, slots=True)
class StartEpoch:
    leader_epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class Follow:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class Commit:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class FailWaiters:
    reason: str


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
    joining: tuple[int, ...]
    leaving: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Truncate:
    offset: int


Effect = StartEpoch | Follow | Commit | FailWaiters | ProposeIsr | Truncate


class Replica:
    """See the module docstring."""

    __slots__ = (
        "_isr_retry_at_ms",
        "_resend",
        "high_watermark",
        "ineligible",
        "isr",
        "lag_time_max_ms",
        "leader",
        "leader_epoch",
        "leader_id",
        "min_insync_replicas",
        "node_id",
        "partition_epoch",
        "refusals",
        "replicas",
    )

    def __init__(self, node_id: int, *, high_watermark: int = 0, lag_time_max_ms: int) -> None:
        self.node_id = node_id
        self.high_watermark = high_watermark
        """Consumers read below it; as follower, the leader's as last fetched, capped by
        this log's end."""
        self.lag_time_max_ms = lag_time_max_ms
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.min_insync_replicas = 1
        self.ineligible: frozenset[int] = frozenset()
        """Brokers that may not join an ISR now: fenced or shutting down (KIP-841)."""
        self.leader: LeaderState | None = None
        """The followers' progress, while this replica leads."""
        self.refusals = Refusals()
        """The idempotent batches this replica refused, while their gaps are open."""
        self._isr_retry_at_ms = 0
        self._resend = False

    @property
    def role(self) -> Role:
        if self.leader is not None:
            return Role.LEADER
        return Role.FOLLOWER if self.leader_id >= 0 else Role.OFFLINE

    # --- the metadata ----------------------------------------------------------------------

    def apply(
        self, assignment: Assignment, *, log_end: int, durable_end: int, now_ms: int
    ) -> list[Effect]:
        """The metadata's view of the partition changed (or was first seen)."""
        self.min_insync_replicas = assignment.min_insync_replicas
        same_leader = (assignment.leader, assignment.leader_epoch) == (
            self.leader_id,
            self.leader_epoch,
        )
        if same_leader and assignment.partition_epoch < self.partition_epoch:
            return []  # an AlterPartition answer told this leader more than the image has yet
        if assignment.leader_epoch < self.leader_epoch:
            return []  # metadata older than what this replica acted on: leader epochs only grow
        self.replicas, self.isr = assignment.replicas, assignment.isr
        self.partition_epoch = assignment.partition_epoch
        if same_leader:
            if self.leader is None:
                return []
            self.leader.update(
                replicas=self.replicas,
                isr=self.isr,
                partition_epoch=self.partition_epoch,
                now_ms=now_ms,
            )
            return self._advance(durable_end)
        effects: list[Effect] = []
        if self.leader is not None:
            self.leader = None
            effects.append(FailWaiters(f"leader epoch {assignment.leader_epoch} began"))
        self.leader_id, self.leader_epoch = assignment.leader, assignment.leader_epoch
        if assignment.leader == self.node_id:
            effects.append(StartEpoch(self.leader_epoch, log_end))
            self.high_watermark = min(self.high_watermark, log_end)
            self.leader = LeaderState(
                node_id=self.node_id,
                replicas=self.replicas,
                isr=self.isr,
                leader_epoch=self.leader_epoch,
                partition_epoch=self.partition_epoch,
                epoch_start_offset=log_end,
                now_ms=now_ms,
            )
            self._isr_retry_at_ms = 0
            effects.extend(self._advance(durable_end))
        else:  # another leader, or none (-1: stop fetching until there is one)
            effects.append(Follow(assignment.leader, assignment.leader_epoch))
        return effects

    def go_offline(self) -> list[Effect]:
        """The partition is deleted or closed here."""
        self.leader_id = -1
        if self.leader is None:
            return []
        self.leader = None
        return [FailWaiters("the partition went offline here")]

    def set_ineligible(self, brokers: frozenset[int], *, now_ms: int) -> list[Effect]:
        """Fenced and shutting-down brokers changed; a caught-up replica that was
        ineligible may join the ISR now."""
        self.ineligible = brokers
        return self._propose(now_ms)

    # --- as leader ---------------------------------------------------------------------------

    def admit(self, acks: int) -> tuple[ErrorCode, str | None]:
        """May a produce with `acks` append now? acks=all needs min.insync.replicas. The
        shell records a refusal in `refusals` (replication/admission.py)."""
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            return ErrorCode.not_enough_replicas, (
                f"{len(self.isr)} in-sync replica(s), min.insync.replicas is "
                f"{self.min_insync_replicas}"
            )
        return ErrorCode.none, None

    def not_committed(self, timeout_s: float) -> tuple[ErrorCode, str]:
        """Why an acks=all produce was not committed within its timeout."""
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append, (
                f"the ISR shrank to {len(self.isr)}, below min.insync.replicas "
                f"{self.min_insync_replicas}, after the append"
            )
        return ErrorCode.request_timed_out, (
            f"not replicated to the ISR {list(self.isr)} within {timeout_s:g} s"
        )

    def on_durable(self, durable_end: int) -> list[Effect]:
        """The leader's own records are appended (and fsynced, where asked) up to here."""
        return self._advance(durable_end)

    def diverging(
        self, fetch_offset: int, last_fetched_epoch: int, end_offset_for: EndOffsetFor
    ) -> tuple[int, int] | None:
        """(epoch, end offset) where a fetcher's log left this leader's, or None: its last
        fetched epoch is unknown here or ends before its fetch offset."""
        if last_fetched_epoch < 0:
            return None
        epoch, end_offset = end_offset_for(last_fetched_epoch)
        if epoch < last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    def on_follower_fetch(
        self,
        broker_id: int,
        fetch_offset: int,
        *,
        log_start: int,
        log_end: int,
        durable_end: int,
        now_ms: int,
        follower_start: int = -1,
    ) -> tuple[ErrorCode, list[Effect]]:
        """A follower fetched from `fetch_offset`: it holds every record below it, and its
        log starts at `follower_start` (-1: it did not say)."""
        if self.leader is None:
            return ErrorCode.not_leader_or_follower, []
        if fetch_offset > log_end or fetch_offset < log_start:
            return ErrorCode.offset_out_of_range, []
        if not self.leader.on_fetch(broker_id, fetch_offset, log_end, now_ms, follower_start):
            return ErrorCode.not_leader_or_follower, []  # not a replica of this partition
        effects = self._advance(durable_end)
        effects.extend(self._propose(now_ms))
        return ErrorCode.none, effects

    def tick(self, *, now_ms: int) -> list[Effect]:
        """The periodic ISR check: members lagging for `lag_time_max_ms` leave."""
        return self._propose(now_ms)

    def isr_answered(
        self, isr: tuple[int, ...], partition_epoch: int, *, durable_end: int, now_ms: int
    ) -> list[Effect]:
        """The controller committed `isr` at `partition_epoch` (AlterPartition answer)."""
        leader = self.leader
        if leader is None:
            return []
        if partition_epoch >= self.partition_epoch:
            self.isr, self.partition_epoch = isr, partition_epoch
        leader.pending_isr = None
        leader.update(
            replicas=self.replicas, isr=isr, partition_epoch=partition_epoch, now_ms=now_ms
        )
        return self._advance(durable_end)

    def isr_refused(self, error: ErrorCode, *, now_ms: int) -> None:
        """The controller refused the change with `error`. If it was certainly not made,
        the leader forgets it and proposes again (what is still needed), no sooner than
        ISR_RETRY_MS from now; otherwise it waits for the metadata, which settles it."""
        if self.leader is not None and error in NOT_APPLIED:
            self.leader.refused()
        self._isr_retry_at_ms = now_ms + ISR_RETRY_MS

    def isr_unanswered(self, *, now_ms: int) -> None:
        """The change was not sent, or its answer was lost: it may have been made. It
        keeps counting, and goes again (the same change) ISR_RETRY_MS from now."""
        self._isr_retry_at_ms = now_ms + ISR_RETRY_MS
        self._resend = True

    def _advance(self, durable_end: int) -> list[Effect]:
        if self.leader is None:
            return []
        candidate = self.leader.high_watermark(durable_end, self.min_insync_replicas)
        if candidate is None or candidate <= self.high_watermark:
            return []
        self.high_watermark = candidate
        return [Commit(candidate)]

    def _propose(self, now_ms: int) -> list[Effect]:
        leader = self.leader
        if leader is None or now_ms < self._isr_retry_at_ms:
            return []
        if self._resend and leader.pending_isr is not None:
            self._resend = False
            return [self._proposal(leader.pending_isr, leader)]
        self._resend = False
        isr = leader.next_isr(
            now_ms, self.lag_time_max_ms, self.high_watermark, ineligible=self.ineligible
        )
        if not isr:
            return []
        leader.propose(isr)
        return [self._proposal(isr, leader)]

    def _proposal(self, isr: tuple[int, ...], leader: LeaderState) -> ProposeIsr:
        return ProposeIsr(
            isr,
            self.leader_epoch,
            leader.partition_epoch,
            joining=tuple(b for b in isr if b not in self.isr),
            leaving=tuple(b for b in self.isr if b not in isr),
        )

    # --- as follower ---------------------------------------------------------------------------

    def on_leader_high_watermark(self, leader_high_watermark: int, *, log_end: int) -> None:
        """A fetch answer carried the leader's high watermark."""
        if self.leader is None:
            self.high_watermark = max(0, min(leader_high_watermark, log_end))

    def truncation(
        self,
        leader_epoch: int,
        leader_end_offset: int,
        *,
        end_offset_for: EndOffsetFor,
        log_end: int,
    ) -> Truncate:
        """Where to cut this log, given where its leader says our last epoch ends there.

        Always a Truncate, also at or past the log end: the log's epochs starting there
        (an epoch this replica led without appending) must go, or every later fetch
        would diverge at the same offset again."""
        offset = truncation_offset(
            leader_epoch,
            leader_end_offset,
            local_end_offset_for=end_offset_for,
            log_end_offset=log_end,
            high_watermark=self.high_watermark,
        )
        return Truncate(offset)

    def truncated(self, *, log_end: int) -> None:
        """The log was cut to end at `log_end`: nothing at or past it is held here."""
        self.high_watermark = min(self.high_watermark, log_end)
