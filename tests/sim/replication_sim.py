"""A seeded, deterministic simulation of one partition's replicas, each a `Replica` core.

One `Random(seed)` decides everything: 3 or 4 replicas, min.insync.replicas 1 or 2, when
clients produce (acks=all) and to whom, message delays (sometimes long: reordering),
losses, and faults: links between replicas cut (one node from the others, 1 | 2 splits,
bridges, flapping topologies), a node's heartbeats to the controller cut (it is fenced
while it still reaches the other replicas), crashes that lose what was not fsynced
(followed by a restart that re-registers, as a real broker does), and pauses. The clock
is manual: one step is one millisecond; nothing sleeps.

The pieces around the cores are small models of the shell and the controller:
- `SimLog` keeps what `PartitionLog` promises: records with their leader epoch, a durable
  (fsynced) prefix, and the leader epoch cache (`strom.log.leader_epochs.LeaderEpochs`,
  the same class the broker uses); a crash drops the tail that was not fsynced.
- a follower fetches like server/replica_fetcher.py: OffsetForLeaderEpoch first, then
  Fetch from its log end with its last fetched epoch, fsyncing before the next fetch;
- `Controller` fences a broker whose heartbeats stop, elects the first live ISR member,
  unfences on heartbeat, and answers AlterPartition with Kafka's checks (leader epoch,
  partition epoch, eligible members). Every change reaches the replicas as versioned
  metadata, in order (a replica applies only newer versions, as from a metadata log).

Checked after every step (`InvariantViolation` names the step):
1. leader epochs only grow: the controller's, and each replica's view, across restarts;
2. acks=all is answered only for a record every member of the acknowledging leader's
   maximal ISR holds (durably) at that offset;
3. no divergence below the high watermark: every replica's log below its high watermark
   is a prefix of the committed log (everything any leader ever exposed);
4. no committed record lost while an ISR member survives: every live member of the
   controller's ISR holds the committed log below the high watermark it has.
Then every fault heals (a node may stay fenced for good while it still reaches the
others), and within a bounded time the partition must recover: the ISR is every eligible
replica, the leader's high watermark reaches its log end, the ISR's logs are identical,
and every acknowledged record is there, once, at its offset, with nothing read before
(below any high watermark ever) gone.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from random import Random
from typing import Any

from kio.schema.errors import ErrorCode

from strom.log.leader_epochs import LeaderEpochs
from strom.replication.replica import (
    Assignment,
    Commit,
    Effect,
    FailWaiters,
    Follow,
    ProposeIsr,
    Replica,
    Role,
    StartEpoch,
    Truncate,
)

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
        self.durable = min(self.durable, offset)
        self.epochs.truncate_from_end(offset)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.epochs.end_offset_for(epoch, self.end)

    def crash(self) -> None:
        del self.records[self.durable :]
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


class Simulation:
    def __init__(self, seed: int, broken: str | None = None) -> None:
        self.rng = rng = Random(seed)
        self.seed = seed
        options = BROKEN[broken] if broken else {}
        self._replica_class: type[Replica] = options.get("replica", Replica)
        keep = bool(options.get("keep_empty_epochs", False))
        count = rng.choice((3, 3, 4))
        replicas = tuple(range(1, count + 1))
        self.controller = Controller(replicas, min_isr=rng.choice((1, 2, 2)))
        self.nodes = {n: Node(n, SimLog(keep_empty_epochs=keep)) for n in replicas}
        self.now = 0
        self.queue: list[tuple[int, int, int, int, Any]] = []
        self._seq = 0
        self.cut: set[frozenset[int]] = set()
        self.mute: set[int] = set()
        """Nodes whose heartbeats the controller does not hear."""
        self.deaf: set[int] = set()
        """Nodes that hear nothing from the controller (one-way loss: its answers and the
        metadata), while the controller still hears them."""
        self.stuck_fenced: int | None = None
        self.loss = rng.choice((0.0, 0.01, 0.05))
        self.slow = rng.choice((0.0, 0.02, 0.1))
        self.produce_rate = rng.choice((0.05, 0.2, 0.5))
        self.quiet_after_ms = rng.choice((None, None, 150))
        """Clients stop writing then, for the rest of the faults: a quiet partition, as
        most of __consumer_offsets is."""
        self.acked: dict[str, int] = {}
        self.committed: list[Record] = []
        self._values = 0
        self.faults_until: dict[str, int] = {}
        for node in self.nodes.values():
            self._start(node)

    # --- network -----------------------------------------------------------------------------

    def send(self, src: int, dst: int, message: Any) -> None:
        if frozenset((src, dst)) in self.cut or self.rng.random() < self.loss:
            return
        if src == CONTROLLER and dst in self.deaf:
            return
        delay = self.rng.randint(1, 4)
        if self.rng.random() < self.slow:
            delay += self.rng.randint(10, 80)
        self._seq += 1
        heapq.heappush(self.queue, (self.now + delay, self._seq, src, dst, message))

    def _deliver(self) -> None:
        while self.queue and self.queue[0][0] <= self.now:
            _, _, src, dst, message = heapq.heappop(self.queue)
            if frozenset((src, dst)) in self.cut:
                continue
            if dst == CONTROLLER:
                self._on_controller(src, message)
            elif dst == CLIENT:
                self._on_client(message)
            else:
                node = self.nodes[dst]
                if not node.alive:
                    continue
                if node.paused_until > self.now:
                    self._seq += 1
                    heapq.heappush(self.queue, (node.paused_until, self._seq, src, dst, message))
                    continue
                self._on_node(node, src, message)

    # --- the controller's side ----------------------------------------------------------------

    def _on_controller(self, src: int, message: Any) -> None:
        kind = message[0]
        c = self.controller
        if kind == "heartbeat":
            if src not in self.mute:
                c.heartbeat(src, message[1], self.now)
        elif kind == "register":
            self.send(CONTROLLER, src, ("registered", c.register(src, self.now)))
        elif kind == "alter":
            _, leader_epoch, partition_epoch, isr = message
            error = c.alter(src, leader_epoch, partition_epoch, isr)
            self.send(CONTROLLER, src, ("altered", error, isr, c.isr, c.partition_epoch))
        self._publish()

    def _publish(self, everyone: bool = False) -> None:
        c = self.controller
        for node in self.nodes.values():
            if everyone or node.metadata is None or node.metadata[0] < c.version:
                self.send(
                    CONTROLLER,
                    node.node_id,
                    ("metadata", c.version, c.assignment(), frozenset(c.fenced)),
                )

    # --- the replicas' side -------------------------------------------------------------------

    def _start(self, node: Node) -> None:
        log = node.log
        node.replica = self._replica_class(
            node.node_id,
            high_watermark=min(log.hw_checkpoint, log.end),
            lag_time_max_ms=LAG_TIME_MAX_MS,
        )
        node.following = None
        node.waiters = []
        node.alter_sent = -1
        node.flush_due = -1
        if node.metadata is not None:  # replayed from the metadata log at start
            version, assignment, fenced = node.metadata
            self._apply_metadata(node, version, assignment, fenced, replay=True)
            node.serving = False
            node.registration = -1

    def _apply_metadata(
        self,
        node: Node,
        version: int,
        assignment: Assignment,
        fenced: frozenset[int],
        *,
        replay: bool = False,
    ) -> None:
        if not replay and node.metadata is not None and version <= node.metadata[0]:
            return
        node.metadata = (version, assignment, fenced)
        replica = node.replica
        assert replica is not None
        effects = replica.apply(
            assignment, log_end=node.log.end, durable_end=node.log.durable, now_ms=self.now
        )
        effects += replica.set_ineligible(fenced, now_ms=self.now)
        self._carry_out(node, effects)
        self._maybe_serve(node)

    @staticmethod
    def _maybe_serve(node: Node) -> None:
        """A restarted node serves once the metadata shows it unfenced after its
        registration (its lifecycle's unfenced event)."""
        if node.metadata is not None:
            version, _, fenced = node.metadata
            if 0 <= node.registration < version and node.node_id not in fenced:
                node.serving = True

    def _carry_out(self, node: Node, effects: list[Effect]) -> None:
        replica = node.replica
        assert replica is not None
        for effect in effects:
            if isinstance(effect, StartEpoch):
                node.log.assign_epoch_start(effect.leader_epoch, effect.start_offset)
                node.following = None
            elif isinstance(effect, Follow):
                node.following = (
                    Following(
                        effect.leader_id,
                        effect.leader_epoch,
                        truncating=node.log.epochs.latest_epoch >= 0,
                    )
                    if effect.leader_id >= 0
                    else None
                )
            elif isinstance(effect, Commit):
                self._committed(node, effect.high_watermark)
            elif isinstance(effect, FailWaiters):
                for _, value in node.waiters:
                    self.send(node.node_id, CLIENT, ("failed", value))
                node.waiters = []
            elif isinstance(effect, ProposeIsr):
                node.alter_sent = self.now
                self.send(
                    node.node_id,
                    CONTROLLER,
                    ("alter", effect.leader_epoch, effect.partition_epoch, effect.isr),
                )
            elif isinstance(effect, Truncate):
                node.log.truncate_to(effect.offset)
                replica.truncated(log_end=node.log.end)

    def _committed(self, node: Node, high_watermark: int) -> None:
        replica = node.replica
        assert replica is not None and replica.leader is not None
        self._extend_committed(node, high_watermark)
        released = [(o, v) for o, v in node.waiters if o < high_watermark]
        node.waiters = [(o, v) for o, v in node.waiters if o >= high_watermark]
        for offset, value in released:
            for member in replica.leader.maximal_isr:
                log = self.nodes[member].log
                durable = log.durable if member == node.node_id else log.end
                holds = offset < durable and log.records[offset][1] == value
                if not holds:
                    self.fail(
                        f"acks=all answered for {value}@{offset} by leader {node.node_id} "
                        f"(epoch {replica.leader_epoch}), but ISR member {member} does not "
                        f"hold it: {log.records[offset : offset + 1]}"
                    )
            self.send(node.node_id, CLIENT, ("acked", value, offset))

    def _extend_committed(self, node: Node, high_watermark: int) -> None:
        records = node.log.records
        if high_watermark > len(self.committed):
            self.committed.extend(records[len(self.committed) : high_watermark])

    def _on_node(self, node: Node, src: int, message: Any) -> None:
        replica = node.replica
        assert replica is not None
        kind = message[0]
        if kind == "metadata":
            self._apply_metadata(node, message[1], message[2], message[3])
        elif kind == "registered":
            node.registration = message[1]
            self._maybe_serve(node)
        elif kind == "altered":
            _, error, proposed, isr, partition_epoch = message
            leader = replica.leader
            if leader is None or leader.pending_isr != proposed:
                return
            node.alter_sent = -1
            if error is None:
                self._carry_out(
                    node,
                    replica.isr_answered(
                        isr, partition_epoch, durable_end=node.log.durable, now_ms=self.now
                    ),
                )
            else:
                replica.isr_refused(ErrorCode[error], now_ms=self.now)
        elif kind == "produce":
            self._on_produce(node, message[1])
        elif kind in ("fetch", "epoch"):
            if node.serving:
                self._on_fetch_side(node, src, message)
        elif kind in ("fetched", "epoch_end", "refused"):
            self._on_answer(node, src, message)

    def _on_produce(self, node: Node, value: str) -> None:
        replica = node.replica
        assert replica is not None
        if not node.serving or replica.role is not Role.LEADER:
            return
        error, _ = replica.admit(-1)
        if error.name != "none":
            return
        offset = node.log.end
        node.log.append([(replica.leader_epoch, value)])
        node.waiters.append((offset, value))

    def _on_fetch_side(self, node: Node, src: int, message: Any) -> None:
        replica = node.replica
        assert replica is not None
        kind, leader_epoch = message[0], message[1]
        request = message[-1]
        if replica.role is not Role.LEADER or replica.leader_epoch != leader_epoch:
            self.send(node.node_id, src, ("refused", leader_epoch, request, False))
            return
        log = node.log
        if kind == "epoch":
            epoch, end = log.end_offset_for(message[2])
            self.send(node.node_id, src, ("epoch_end", leader_epoch, message[3], epoch, end))
            return
        _, _, fetch_offset, last_epoch, request = message
        diverging = replica.diverging(fetch_offset, last_epoch, log.end_offset_for)
        if diverging is not None:
            answer = ("fetched", leader_epoch, request, diverging, [], replica.high_watermark)
            self.send(node.node_id, src, answer)
            return
        error, effects = replica.on_follower_fetch(
            src,
            fetch_offset,
            log_start=0,
            log_end=log.end,
            durable_end=log.durable,
            now_ms=self.now,
        )
        self._carry_out(node, effects)
        if error.name != "none":
            out_of_range = error.name == "offset_out_of_range"
            self.send(node.node_id, src, ("refused", leader_epoch, request, out_of_range))
            return
        records = log.records[fetch_offset : fetch_offset + self.rng.randint(1, 8)]
        answer = ("fetched", leader_epoch, request, None, records, replica.high_watermark)
        self.send(node.node_id, src, answer)

    def _on_answer(self, node: Node, src: int, message: Any) -> None:
        replica = node.replica
        following = node.following
        assert replica is not None
        if (
            following is None
            or following.leader != src
            or following.leader_epoch != message[1]
            or following.request != message[2]
            or following.waiting_since < 0
        ):
            return
        following.waiting_since = -1
        kind = message[0]
        if kind == "refused":
            if message[3]:  # out of range: ask where our epoch ends
                following.truncating = True
            following.retry_at = self.now + 5
            return
        if kind == "epoch_end":
            _, _, _, epoch, end = message
            truncate = replica.truncation(
                epoch, end, end_offset_for=node.log.end_offset_for, log_end=node.log.end
            )
            self._carry_out(node, [truncate])
            following.truncating = False
            return
        _, _, _, diverging, records, high_watermark = message
        if diverging is not None:
            truncate = replica.truncation(
                diverging[0],
                diverging[1],
                end_offset_for=node.log.end_offset_for,
                log_end=node.log.end,
            )
            self._carry_out(node, [truncate])
            return
        if records:
            node.log.append(records)
        replica.on_leader_high_watermark(high_watermark, log_end=node.log.end)

    # --- time ---------------------------------------------------------------------------------

    def _tick_node(self, node: Node) -> None:
        replica = node.replica
        if replica is None:
            if 0 <= node.restart_at <= self.now:
                node.restart_at = -1
                self._start(node)
            return
        if node.paused_until > self.now:
            return
        log = node.log
        if log.durable < log.end and node.flush_due < 0:
            node.flush_due = self.now + self.rng.randint(0, 3)  # the flusher's next round
        if 0 <= node.flush_due <= self.now:
            node.flush_due = -1
            log.durable = log.end
            self._carry_out(node, replica.on_durable(log.durable))
        if not node.serving and node.registration < 0 and self.now % 20 == 0:
            self.send(node.node_id, CONTROLLER, ("register",))
        if self.now % HEARTBEAT_MS == node.node_id % HEARTBEAT_MS:
            version = node.metadata[0] if node.metadata is not None else -1
            self.send(node.node_id, CONTROLLER, ("heartbeat", version))
        if self.now % 50 == 0:
            log.hw_checkpoint = replica.high_watermark
        if replica.role is Role.LEADER:
            if self.now % (LAG_TIME_MAX_MS // 2) == 0:
                self._carry_out(node, replica.tick(now_ms=self.now))
            if node.alter_sent >= 0 and self.now - node.alter_sent > REQUEST_TIMEOUT_MS:
                node.alter_sent = -1
                replica.isr_unanswered(now_ms=self.now)
        following = node.following
        if following is None:
            return
        if log.durable < log.end:
            return  # appended records are fsynced before the next fetch says it holds them
        if following.waiting_since >= 0:
            if self.now - following.waiting_since < REQUEST_TIMEOUT_MS:
                return
            following.waiting_since = -1
        if following.retry_at > self.now:
            return
        following.waiting_since = self.now
        self._seq += 1  # unique in the run: a restarted node's connections are new ones
        following.request = request = self._seq
        if following.truncating:
            if log.epochs.latest_epoch < 0:
                following.truncating = False
            else:
                message = ("epoch", following.leader_epoch, log.epochs.latest_epoch, request)
                self.send(node.node_id, following.leader, message)
                return
        message = ("fetch", following.leader_epoch, log.end, log.epochs.latest_epoch, request)
        self.send(node.node_id, following.leader, message)

    def _on_client(self, message: Any) -> None:
        if message[0] == "acked":
            _, value, offset = message
            self.acked[value] = offset

    def _produce(self, *, faults: bool) -> None:
        quiet = faults and self.quiet_after_ms is not None and self.now > self.quiet_after_ms
        if quiet or self.rng.random() >= self.produce_rate:
            return
        self._values += 1
        value = f"v{self._values}"
        c = self.controller
        target = c.leader if self.rng.random() < 0.9 else self.rng.choice(c.replicas)
        if target > 0:
            self.send(CLIENT, target, ("produce", value))

    def step(self, *, faults: bool, produce: bool) -> None:
        self.now += 1
        if faults:
            self._inject()
        if produce:
            self._produce(faults=faults)
        self._deliver()
        for node in self.nodes.values():
            self._tick_node(node)
        self.controller.tick(self.now)
        if self.now % METADATA_RESEND_MS == 0:
            self._publish(everyone=True)
        self._publish()
        self.check()

    # --- faults -------------------------------------------------------------------------------

    def _inject(self) -> None:
        rng = self.rng
        for name, until in list(self.faults_until.items()):
            if until <= self.now:
                del self.faults_until[name]
                self._end_fault(name)
        if rng.random() > 0.01 or len(self.faults_until) >= 2:
            return
        ids = list(self.nodes)
        kind = rng.choice(FAULT_KINDS)
        length = rng.randint(20, 300)
        if kind in ("isolate", "split", "bridge", "flap") and "net" not in self.faults_until:
            rng.shuffle(ids)
            if kind == "isolate" or kind == "split":
                side = set(ids[: 1 if kind == "isolate" else rng.randint(1, len(ids) - 1)])
                pairs = {frozenset((a, b)) for a in side for b in ids if b not in side}
            elif kind == "bridge":
                pairs = {frozenset((ids[0], ids[2]))}
            else:
                pairs = {
                    frozenset((a, b)) for a in ids for b in ids if a < b and rng.random() < 0.4
                }
                length = rng.randint(5, 60)
            if rng.random() < 0.3:  # the controller too
                pairs |= {frozenset((ids[0], CONTROLLER))}
            self.cut = pairs
            self.faults_until["net"] = self.now + length
        elif kind == "crash":
            node = self.nodes[rng.choice(ids)]
            if node.alive:
                node.log.crash()
                node.replica = None
                node.restart_at = self.now + rng.randint(5, 200)
        elif kind == "pause":
            node = self.nodes[rng.choice(ids)]
            node.paused_until = max(node.paused_until, self.now + rng.randint(5, 150))
        elif kind == "deafen_leader" and "deaf" not in self.faults_until:
            if self.controller.leader > 0:
                self.deaf = {self.controller.leader}
                self.faults_until["deaf"] = self.now + length
        elif kind in ("mute", "fence_leader") and "mute" not in self.faults_until:
            # The controller stops hearing a node (the leader, for "fence_leader": cut from
            # the controller, as the active controller is when the network splits).
            leader = self.controller.leader
            target = leader if kind == "fence_leader" and leader > 0 else rng.choice(ids)
            self.mute = {target}
            if rng.random() < 0.5:  # its answers from the controller are lost too
                self.cut = self.cut | {frozenset((target, CONTROLLER))}
            self.faults_until["mute"] = self.now + length

    def _end_fault(self, name: str) -> None:
        if name == "net":
            self.cut = set()
        elif name == "deaf":
            self.deaf = set()
        elif name == "mute":
            self.cut = {pair for pair in self.cut if CONTROLLER not in pair}
            self.mute = set()

    def heal(self) -> None:
        self.faults_until.clear()
        self.cut = set()
        self.mute = set()
        self.deaf = set()
        for node in self.nodes.values():
            node.paused_until = 0
            if not node.alive:
                node.restart_at = self.now

    # --- checks -------------------------------------------------------------------------------

    def fail(self, problem: str) -> None:
        raise InvariantViolation(f"seed {self.seed}, step {self.now}: {problem}\n{self.describe()}")

    def describe(self) -> str:
        c = self.controller
        lines = [
            f"controller: leader {c.leader} epoch {c.leader_epoch} isr {list(c.isr)} "
            f"partition epoch {c.partition_epoch} fenced {sorted(c.fenced)} (min isr {c.min_isr})",
            f"committed {len(self.committed)}, acked {len(self.acked)}",
        ]
        for node in self.nodes.values():
            r = node.replica
            state = (
                "down"
                if r is None
                else f"{r.role.value} epoch {r.leader_epoch} hw {r.high_watermark} "
                f"isr {list(r.isr)} pending {r.leader.pending_isr if r.leader else None}"
            )
            lines.append(
                f"node {node.node_id}: {state}; log end {node.log.end} durable "
                f"{node.log.durable} epochs {list(node.log.epochs.entries)} following "
                f"{node.following}"
            )
        return "\n".join(lines)

    def check(self) -> None:
        c = self.controller
        for node in self.nodes.values():
            replica = node.replica
            if replica is None:
                continue
            if replica.leader_epoch < node.max_epoch:
                self.fail(f"node {node.node_id}'s leader epoch went back to {replica.leader_epoch}")
            node.max_epoch = replica.leader_epoch
            hw = replica.high_watermark
            if hw > len(self.committed) and replica.role is Role.LEADER:
                self.fail(f"leader {node.node_id}'s high watermark {hw} passed what it committed")
            if node.log.records[:hw] != self.committed[:hw]:
                self.fail(f"node {node.node_id} diverges below its high watermark {hw}")
        leader = self.nodes.get(c.leader)
        if leader is not None and leader.replica is not None and c.leader not in c.fenced:
            replica = leader.replica
            held = leader.log.records[: len(self.committed)]
            if replica.leader_epoch == c.leader_epoch and held != self.committed:
                self.fail(f"leader {c.leader} lacks records committed before it was elected")
        for member in c.isr:
            node = self.nodes[member]
            if node.replica is None or member in c.fenced:
                continue
            held = min(len(self.committed), node.log.end)
            if node.log.records[:held] != self.committed[:held]:
                self.fail(f"ISR member {member} lost or changed a committed record")

    def converged(self) -> str | None:
        """None when recovered; else what is still missing."""
        c = self.controller
        expected = tuple(r for r in c.replicas if r != self.stuck_fenced)
        if c.leader < 0 or set(c.isr) != set(expected):
            return f"ISR {list(c.isr)} is not {list(expected)}"
        leader = self.nodes[c.leader]
        replica = leader.replica
        if replica is None or replica.role is not Role.LEADER:
            return f"node {c.leader} does not lead yet"
        if replica.high_watermark != leader.log.end:
            return f"high watermark {replica.high_watermark} below the log end {leader.log.end}"
        for member in c.isr:
            if self.nodes[member].log.records != leader.log.records:
                return f"ISR member {member}'s log differs from the leader's"
        if len(self.committed) > replica.high_watermark:
            return f"{len(self.committed)} records were read, {replica.high_watermark} are readable"
        return None

    def final_check(self) -> None:
        c = self.controller
        records = self.nodes[c.leader].log.records
        values = [value for _, value in records]
        if len(values) != len(set(values)):
            self.fail("a value is in the log twice")
        for value, offset in self.acked.items():
            if offset >= len(records) or records[offset][1] != value:
                self.fail(f"acknowledged {value}@{offset} is not in the log")


def settle(sim: Simulation, what: str) -> None:
    """Run without new faults until the partition has recovered (see `converged`)."""
    start = sim.now
    while True:
        sim.step(faults=False, produce=sim.now - start < PRODUCE_UNTIL_SETTLE_MS)
        if sim.now - start > PRODUCE_UNTIL_SETTLE_MS + 100 and sim.converged() is None:
            return
        if sim.now - start > SETTLE_MS:
            sim.fail(f"no recovery {SETTLE_MS} ms after {what}: {sim.converged()}")


def fence_one_and_cut_another(sim: Simulation) -> None:
    """A follower stays fenced for good (its heartbeats are lost) while it still reaches
    the other replicas, and another follower is cut from the leader long enough to leave
    the ISR: once the cut heals, that one must rejoin although the fenced one cannot."""
    c = sim.controller
    followers = [r for r in c.replicas if r != c.leader]
    sim.rng.shuffle(followers)
    fenced, cut = followers[0], followers[1]
    sim.stuck_fenced = fenced
    sim.mute = {fenced}
    sim.cut = {frozenset((cut, c.leader))}
    for _ in range(3 * LAG_TIME_MAX_MS):
        sim.step(faults=False, produce=True)
    sim.cut = set()


def rejoin_unheard_then_fail_over(sim: Simulation) -> None:
    """A follower rejoins the ISR while the leader hears nothing from the controller (the
    change is made, its answer lost); then the leader crashes and the other followers
    are fenced, so the rejoined follower is elected. It must hold every record the old
    leader committed: the lost answer must not have made the leader forget it."""
    c = sim.controller
    leader = c.leader
    followers = [r for r in c.replicas if r != leader]
    sim.rng.shuffle(followers)
    rejoining, others = followers[0], followers[1:]
    sim.cut = {frozenset((rejoining, leader))}
    for _ in range(3 * LAG_TIME_MAX_MS):
        sim.step(faults=False, produce=True)
    sim.cut = set()
    sim.deaf = {leader}
    for _ in range(sim.rng.randint(2, 6) * LAG_TIME_MAX_MS):
        sim.step(faults=False, produce=True)
    node = sim.nodes[leader]
    node.log.crash()
    node.replica = None
    node.restart_at = sim.now + 3 * SESSION_TIMEOUT_MS
    sim.mute = set(others)
    sim.deaf = set()
    for _ in range(3 * SESSION_TIMEOUT_MS):
        sim.step(faults=False, produce=True)
    sim.mute = set()


def run_seed(seed: int, broken: str | None = None) -> Simulation:
    sim = Simulation(seed, broken)
    for _ in range(FAULT_PHASE_MS):
        sim.step(faults=True, produce=True)
    sim.heal()
    settle(sim, "the last fault healed")
    if sim.rng.random() < 0.5:
        rejoin_unheard_then_fail_over(sim)
        settle(sim, "a failover to a follower that rejoined unheard")
    if sim.rng.random() < 0.5:
        fence_one_and_cut_another(sim)
        settle(sim, "a follower was fenced for good and another's cut healed")
    sim.final_check()
    return sim
