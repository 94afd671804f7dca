"""The pieces of the replication simulation around the `Replica` cores: the log
(`SimLog`), the controller model, each node's state, and the deliberately broken cores.

`replication_sim.py` says what each models and what the simulation checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strom.log.leader_epochs import LeaderEpochs
from strom.replication.replica import Assignment, Commit, Effect, Replica

CONTROLLER = 0
CLIENT = -1
LAG_TIME_MAX_MS = 60
SESSION_TIMEOUT_MS = 45
HEARTBEAT_MS = 10
METADATA_RESEND_MS = 25
REQUEST_TIMEOUT_MS = 40
FAULT_PHASE_MS = 1_500
SETTLE_MS = 4_000
PRODUCE_UNTIL_SETTLE_MS = 400

FAULT_KINDS = (
    "isolate",  # one node cut from the other replicas
    "split",  # the replicas in two groups
    "bridge",  # A sees B, B sees C, A does not see C
    "flap",  # a random topology for a short while
    "crash",  # kill -9: the tail not fsynced is lost; a restart later
    "pause",  # SIGSTOP: nothing is handled until it ends
    "mute",  # the controller stops hearing a node's heartbeats
    "fence_leader",  # the same, for the leader
    "deafen_leader",  # the leader hears nothing from the controller
)

Record = tuple[int, str]  # (leader epoch, value)


class InvariantViolation(AssertionError):
    pass


# --- the log ---------------------------------------------------------------------------------


class SimLog:
    """PartitionLog's promises in memory (see the module docstring)."""

    def __init__(self, *, keep_empty_epochs: bool = False) -> None:
        self.records: list[Record] = []
        self.durable = 0
        self.epochs = LeaderEpochs()
        self.hw_checkpoint = 0
        self.agreed = 0
        """How many first records the checker found equal to the committed ones; only a
        truncation below it makes the checker look again."""
        self._keep_empty_epochs = keep_empty_epochs  # the bug of anomaly 1, for the tests

    @property
    def end(self) -> int:
        return len(self.records)

    def append(self, records: list[Record]) -> None:
        for epoch, value in records:
            self.epochs.assign(epoch, self.end)
            self.records.append((epoch, value))

    def assign_epoch_start(self, epoch: int, offset: int) -> None:
        assert offset == self.end, (offset, self.end)
        self.epochs.assign(epoch, offset)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end:
            if not self._keep_empty_epochs:
                self.epochs.truncate_from_end(self.end)
            return
        del self.records[offset:]
        self.agreed = min(self.agreed, offset)
        self.durable = min(self.durable, offset)
        self.epochs.truncate_from_end(offset)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.end)

    def crash(self) -> None:
        del self.records[self.durable :]
        self.agreed = min(self.agreed, self.durable)
        self.epochs.truncate_from_end(self.end)


# --- the controller ----------------------------------------------------------------------------


@dataclass(slots=True)
class Controller:
    replicas: tuple[int, ...]
    min_isr: int
    leader: int = -1
    leader_epoch: int = 0
    partition_epoch: int = 0
    isr: tuple[int, ...] = ()
    fenced: set[int] = field(default_factory=set)
    last_heartbeat: dict[int, int] = field(default_factory=dict)
    registered_at: dict[int, int] = field(default_factory=dict)
    """node -> the metadata version of its registration (its broker epoch)."""
    version: int = 0

    def __post_init__(self) -> None:
        self.leader, self.isr = self.replicas[0], self.replicas
        self.leader_epoch = 1

    def assignment(self) -> Assignment:
        return Assignment(
            self.leader,
            self.leader_epoch,
            self.partition_epoch,
            self.replicas,
            self.isr,
            self.min_isr,
        )

    def _changed(self, *, new_leader: int | None = None) -> None:
        if new_leader is not None and new_leader != self.leader:
            self.leader = new_leader
            self.leader_epoch += 1
        self.partition_epoch += 1
        self.version += 1

    def register(self, node: int, now_ms: int) -> int:
        """A restarted node registers: a new incarnation is fenced until it catches up."""
        self.last_heartbeat[node] = now_ms
        self._fence(node)
        self.version += 1
        self.registered_at[node] = self.version
        return self.version

    def heartbeat(self, node: int, metadata_version: int, now_ms: int) -> None:
        self.last_heartbeat[node] = now_ms
        if node in self.fenced and metadata_version >= self.registered_at.get(node, 0):
            self.fenced.discard(node)
            if self.leader == -1 and node in self.isr:
                self._changed(new_leader=node)
            else:
                self.version += 1

    def tick(self, now_ms: int) -> None:
        for node in self.replicas:
            last = self.last_heartbeat.get(node, 0)
            if node not in self.fenced and now_ms - last >= SESSION_TIMEOUT_MS:
                self._fence(node)

    def _fence(self, node: int) -> None:
        if node in self.fenced:
            return
        self.fenced.add(node)
        if node != self.leader and node not in self.isr:
            self.version += 1
            return
        self.isr = tuple(r for r in self.isr if r != node) or (node,)
        leader = self.leader
        if leader in (node, -1):
            leader = next((r for r in self.replicas if r in self.isr and self.live(r)), -1)
        self._changed(new_leader=leader)

    def live(self, node: int) -> bool:
        return node not in self.fenced

    def alter(
        self, node: int, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]
    ) -> str | None:
        """AlterPartition; None when committed, else the error's name."""
        if node != self.leader or leader_epoch != self.leader_epoch:
            return "fenced_leader_epoch"
        if partition_epoch != self.partition_epoch:
            return "invalid_update_version"
        if any(not self.live(member) for member in isr) or node not in isr:
            return "ineligible_replica"
        self.isr = isr
        self._changed()
        return None


# --- the replicas ------------------------------------------------------------------------------


@dataclass(slots=True)
class Following:
    leader: int
    leader_epoch: int
    truncating: bool
    waiting_since: int = -1
    """When the outstanding request went out; -1: none outstanding."""
    request: int = 0
    """The outstanding request's id: an answer to an older one (given up) is dropped, as
    the fetcher drops a connection whose request timed out."""
    retry_at: int = 0


@dataclass(slots=True)
class Node:
    node_id: int
    log: SimLog
    replica: Replica | None = None
    paused_until: int = 0
    restart_at: int = -1
    serving: bool = True
    """False from a restart until the controller unfenced the new incarnation."""
    registration: int = -1
    metadata: tuple[int, Assignment, frozenset[int]] | None = None
    """The newest metadata applied (version, assignment, fenced): survives crashes."""
    max_epoch: int = -1
    following: Following | None = None
    waiters: list[tuple[int, str]] = field(default_factory=list)
    alter_sent: int = -1
    flush_due: int = -1

    @property
    def alive(self) -> bool:
        return self.replica is not None


class BrokenHighWatermark(Replica):
    """Deliberately wrong: the high watermark ignores the followers."""

    def _advance(self, durable_end: int) -> list[Effect]:
        if self.leader is None or durable_end <= self.high_watermark:
            return []
        self.high_watermark = durable_end
        return [Commit(durable_end)]


class FencedJoinIsr(Replica):
    """The bug of anomaly 3: fenced replicas are proposed for the ISR (no KIP-841)."""

    def set_ineligible(self, brokers: frozenset[int], *, now_ms: int) -> list[Effect]:
        return super().set_ineligible(frozenset(), now_ms=now_ms)


class ForgetUnansweredIsr(Replica):
    """Deliberately wrong: an ISR change whose answer was lost is forgotten, though the
    controller may have made it (found by this simulation, seed 306 of the first runs)."""

    def isr_unanswered(self, *, now_ms: int) -> None:
        self.isr_refused(ErrorCode.operation_not_attempted, now_ms=now_ms)


BROKEN: dict[str, Any] = {
    "forget_unanswered_isr": {"replica": ForgetUnansweredIsr},
    "hw_over_lagging_follower": {"replica": BrokenHighWatermark},
    "keep_empty_epochs": {"keep_empty_epochs": True},
    "fenced_join_isr": {"replica": FencedJoinIsr},
}
