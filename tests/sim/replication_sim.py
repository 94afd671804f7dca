"""A seeded, deterministic simulation of one partition's replicas, each a `Replica` core.

One `Random(seed)` decides everything: 3 or 4 replicas, min.insync.replicas 1 or 2, when
clients produce (acks=all) and to whom, message delays (sometimes long: reordering),
losses, and faults: links between replicas cut (one node from the others, 1 | 2 splits,
bridges, flapping topologies), a node's heartbeats to the controller cut (it is fenced
while it still reaches the other replicas), crashes that lose what was not fsynced
(followed by a restart that re-registers, as a real broker does), and pauses. The clock
is manual: one step is one millisecond; nothing sleeps.

The pieces around the cores are small models of the shell and the controller (in
replication_model.py; the shell's side of each core is in replication_replicas.py):
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
from random import Random
from typing import Any

from replication_model import (
    BROKEN,
    CLIENT,
    CONTROLLER,
    FAULT_KINDS,
    FAULT_PHASE_MS,
    LAG_TIME_MAX_MS,
    METADATA_RESEND_MS,
    PRODUCE_UNTIL_SETTLE_MS,
    SESSION_TIMEOUT_MS,
    SETTLE_MS,
    Controller,
    InvariantViolation,
    Node,
    Record,
    SimLog,
)
from replication_replicas import ReplicaSide

from strom.replication.replica import Replica, Role


class Simulation(ReplicaSide):
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
            held, committed = min(hw, node.log.end), min(hw, len(self.committed))
            if held != committed or not self._agrees(node.log, held):
                self.fail(f"node {node.node_id} diverges below its high watermark {hw}")
        leader = self.nodes.get(c.leader)
        if leader is not None and leader.replica is not None and c.leader not in c.fenced:
            replica = leader.replica
            held = self._agrees(leader.log, len(self.committed))
            if replica.leader_epoch == c.leader_epoch and not held:
                self.fail(f"leader {c.leader} lacks records committed before it was elected")
        for member in c.isr:
            node = self.nodes[member]
            if node.replica is None or member in c.fenced:
                continue
            if not self._agrees(node.log, min(len(self.committed), node.log.end)):
                self.fail(f"ISR member {member} lost or changed a committed record")

    def _agrees(self, log: SimLog, count: int) -> bool:
        """Whether the log's first `count` records are the first `count` committed ones
        (False when either has fewer). The committed list only grows and a log changes below
        its end only by truncation, so records already found equal are not compared again."""
        if count > log.end or count > len(self.committed):
            return False
        if count > log.agreed:
            start = log.agreed
            if log.records[start:count] != self.committed[start:count]:
                return False
            log.agreed = count
        return True

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
