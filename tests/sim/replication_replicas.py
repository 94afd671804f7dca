"""How the simulation's shell drives each node's `Replica` core: metadata, effects,
produce, the leader's side of a fetch, the follower's fetcher, and the node's clock.

`ReplicaSide` is mixed into `Simulation` (replication_sim.py), which holds the nodes, the
controller model, the clock, the network (`send`) and the checks (`fail`).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from replication_model import (
    CLIENT,
    CONTROLLER,
    HEARTBEAT_MS,
    LAG_TIME_MAX_MS,
    REQUEST_TIMEOUT_MS,
    Following,
    Node,
)

from strom.replication.replica import (
    Assignment,
    Commit,
    Effect,
    FailWaiters,
    Follow,
    ProposeIsr,
    Role,
    StartEpoch,
    Truncate,
)


class ReplicaSide:
    """The replicas' side of `Simulation`: every input a node's core gets, and its effects."""

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
