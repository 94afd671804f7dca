"""Applies a Schedule to a running TestCluster from the main thread, and heals it.

A fault resolves its target when it fires (the leader of a partition is whoever the
freshest metadata names then), kills or pauses that node, and ends `down_s` later with a
restart or SIGCONT. Each change is recorded as a NodeChanged with the schedule entry and
the node it resolved to. A network fault (on a cluster in network namespaces, network.py)
turns the node it resolved to into a topology (cut from the others, isolated, split,
bridge) or flaps the network; the faults under way add their cuts up, and each change of
the whole set is recorded as a NetworkChanged. While it waits, the injector keeps reading
the nodes' stdout (a full pipe would stop a node) and notes when a restarted node is
ready again.

Every wait has a deadline: a fault that waits for recovery gives up after
RECOVERY_TIMEOUT_S (with a Note) and fires anyway, and later waits then ask only for a
leader for every partition; healing raises ClusterTimeout if even that does not come.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from random import Random

from cluster import ClusterTimeout, TestCluster

from .cluster_view import (
    active_controller,
    freshest,
    leaderless,
    not_recovered,
    topic_views,
    zookeeper_controller,
)
from .history import NetworkChanged, NodeChange, NodeChanged
from .network import Network
from .schedule import FLAP_STEP_S, Action, Fault, Schedule, TargetKind
from .topology import (
    WHOLE,
    ZOOKEEPER,
    Topology,
    bridge_through,
    isolate,
    random_topology,
    split,
    union,
)
from .workload import Recorder

RECOVERY_TIMEOUT_S = 20.0
SETTLE_S = 1.0
"""After a wait for recovery, how long the recovered cluster serves before the fault."""
READY_TIMEOUT_S = 60.0
STEP_S = 0.1
VIEW_EVERY_S = 0.5
HEAL = -1


@dataclass(frozen=True, slots=True)
class _PendingEnd:
    due_s: float
    node: int
    action: Action
    fault: int
    why: str


@dataclass(slots=True)
class _Flap:
    """A flapping network: a new topology at `next_s` until `until_s`."""

    fault: int
    why: str
    rng: Random
    until_s: float
    next_s: float = 0.0
    steps: int = 0
    topology: Topology = field(default=WHOLE)


class FaultInjector:
    """Nodes are up, down (killed or paused by a fault) or starting (restarted, not yet
    ready); a node is the target of one kill or pause at a time. Network faults under way
    (`cuts` by schedule entry, `flaps`) make the network's topology together."""

    def __init__(
        self,
        cluster: TestCluster,
        schedule: Schedule,
        recorder: Recorder,
        *,
        topic: str,
        partitions: list[int],
        network: Network | None = None,
    ) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.recorder = recorder
        self.topic = topic
        self.partitions = partitions
        self.network = network
        self.rng = Random(schedule.seed)
        self.down: dict[int, Action] = {}
        self.starting: dict[int, tuple[int, str]] = {}
        self.pending: list[_PendingEnd] = []
        self.cuts: dict[int, Topology] = {}
        self.flaps: dict[int, _Flap] = {}
        self.shift_s = 0.0
        """How much later than planned the faults fire, after waits for recovery."""
        self.full_isr_given_up = False

    @property
    def with_zookeeper(self) -> bool:
        """Whether ZooKeeper is an endpoint of the network (it can be cut)."""
        return self.network is not None and ZOOKEEPER in self.network.endpoints

    # --- running the schedule ---------------------------------------------------------

    def run_schedule(self) -> None:
        for index, fault in enumerate(self.schedule.faults):
            planned_s = fault.at_s + self.shift_s
            self.idle_until(planned_s)
            if fault.after_recovery:
                if self.wait_recovered(RECOVERY_TIMEOUT_S, f"fault #{index}"):
                    self.idle_until(self.recorder.now_s() + SETTLE_S)
                self.shift_s += max(0.0, self.recorder.now_s() - planned_s)
            self.apply(index, fault)
        ends = [end.due_s for end in self.pending] + [f.until_s for f in self.flaps.values()]
        self.idle_until(max(self.schedule.duration_s + self.shift_s, *ends))

    def apply(self, index: int, fault: Fault) -> None:
        if fault.action.is_network and self.network is None:
            raise ValueError(f"fault #{index} ({fault.describe()}) needs a network: see network.py")
        if fault.action is Action.FLAP:
            self.start_flap(index, fault)
            return
        node, how = self.resolve(fault)
        if node is None:
            self.recorder.note("faults", f"fault #{index} ({fault.describe()}) skipped: {how}")
            return
        why = f"#{index} {fault.describe()}{how}"
        due_s = self.recorder.now_s() + fault.down_s
        if fault.action.is_network:
            self.cuts[index] = self.shape(fault.action, node)
            self.set_network(index, why)
            self.pending.append(_PendingEnd(due_s, node, fault.action, index, why))
            return
        if fault.action is Action.KILL:
            self.cluster.kill(node)
            change = NodeChange.KILLED
        else:
            self.cluster.pause(node)
            change = NodeChange.PAUSED
        self.recorder.add(NodeChanged(self.recorder.now_s(), node, change, index, why))
        self.down[node] = fault.action
        due_s = self.recorder.now_s() + fault.down_s
        self.pending.append(_PendingEnd(due_s, node, fault.action, index, why))

    def resolve(self, fault: Fault) -> tuple[int | None, str]:
        """The node the fault hits now, with how it was found, or None and why not."""
        target = fault.target
        up = self.up_nodes()
        if target.kind is TargetKind.NODE:
            assert target.node is not None
            if target.node in up:
                return target.node, ""
            return None, f"node {target.node} is not up"
        if not up:
            return None, "no node is up"
        if target.kind is TargetKind.RANDOM:
            choice = self.rng.choice(up)
            return choice, f" (node {choice})"
        addresses = {n: self.cluster.address(n) for n in up}
        if target.kind is TargetKind.CONTROLLER:
            zookeeper = self.cluster.zookeeper
            controller = (
                zookeeper_controller(zookeeper) if zookeeper else active_controller(addresses)
            )
            if controller in up:
                return controller, f" (node {controller})"
            return None, f"the active controller is {controller}, not an up node"
        assert target.partition is not None
        view = freshest(topic_views(addresses, self.topic), target.partition)
        if view is None:
            return None, f"no up node knows partition {target.partition}"
        if target.kind is TargetKind.LEADER:
            if view.leader in up:
                return view.leader, f" (node {view.leader}, epoch {view.leader_epoch})"
            return None, f"its leader is {view.leader}, not an up node"
        followers = sorted(n for n in view.replicas if n != view.leader and n in up)
        if not followers:
            return None, f"no follower of partition {target.partition} is up"
        choice = self.rng.choice(followers)
        return choice, f" (node {choice}; leader {view.leader})"

    # --- the network ------------------------------------------------------------------

    def shape(self, action: Action, node: int) -> Topology:
        """The cuts of a network fault around `node`."""
        others = [n for n in self.cluster.node_ids if n != node]
        zookeeper = [ZOOKEEPER] if self.with_zookeeper else []
        if action is Action.CUT:
            return isolate(node, others)
        if action is Action.ISOLATE:
            return isolate(node, [*others, *zookeeper])
        if action is Action.SPLIT:
            return split([node, *zookeeper], others)
        if action is Action.BRIDGE:
            self.rng.shuffle(others)
            return bridge_through(node, others)
        raise ValueError(f"{action} is not a network fault around a node")

    def set_network(self, fault: int, why: str) -> None:
        """Apply the cuts of every network fault under way; record the change, if any."""
        assert self.network is not None
        topology = union([*self.cuts.values(), *(f.topology for f in self.flaps.values())])
        if topology == self.network.topology:
            return
        self.network.apply(topology)
        self.recorder.add(NetworkChanged(self.recorder.now_s(), topology.pairs(), fault, why))

    def start_flap(self, index: int, fault: Fault) -> None:
        why = f"#{index} {fault.describe()}"
        rng = Random(f"{self.schedule.seed}/{index}")
        flap = _Flap(index, why, rng, until_s=self.recorder.now_s() + fault.down_s)
        self.flaps[index] = flap
        self.flap_step(flap)

    def flap_step(self, flap: _Flap) -> None:
        flap.steps += 1
        flap.topology = random_topology(
            flap.rng, self.cluster.node_ids, zookeeper=self.with_zookeeper
        )
        flap.next_s = min(flap.until_s, self.recorder.now_s() + flap.rng.uniform(*FLAP_STEP_S))
        self.set_network(flap.fault, f"{flap.why}: topology {flap.steps}")

    def up_nodes(self) -> list[int]:
        return [
            n
            for n in self.cluster.node_ids
            if n not in self.down and n not in self.starting and self.cluster.is_running(n)
        ]

    # --- waiting ----------------------------------------------------------------------

    def step(self, timeout_s: float) -> None:
        """End the faults that are due, note restarted nodes that are ready, and read the
        nodes' output for up to `timeout_s`."""
        now_s = self.recorder.now_s()
        for end in [e for e in self.pending if e.due_s <= now_s]:
            self.pending.remove(end)
            self.end_fault(end.node, end.action, end.fault, end.why)
        for flap in [f for f in self.flaps.values() if f.next_s <= now_s]:
            if flap.until_s <= now_s:
                del self.flaps[flap.fault]
                self.set_network(flap.fault, f"end of {flap.why}")
            else:
                self.flap_step(flap)
        self.cluster.local.pump(timeout_s)
        for node_id, (index, why) in list(self.starting.items()):
            node = self.cluster.local.node(node_id)
            if node.is_ready:
                del self.starting[node_id]
                self.recorder.add(
                    NodeChanged(self.recorder.now_s(), node_id, NodeChange.READY, index, why)
                )
            elif not node.is_running:
                del self.starting[node_id]
                self.down[node_id] = Action.KILL
                self.recorder.note("faults", f"node {node_id} exited while starting ({why})")

    def end_fault(self, node: int, action: Action, index: int, why: str) -> None:
        if action.is_network:
            self.cuts.pop(index, None)
            self.set_network(index, f"end of {why}")
            return
        self.down.pop(node, None)
        if action is Action.PAUSE:
            self.recorder.add(
                NodeChanged(self.recorder.now_s(), node, NodeChange.RESUMED, index, why)
            )
            self.cluster.resume(node)
            return
        if self.cluster.is_running(node):
            return
        self.recorder.add(
            NodeChanged(self.recorder.now_s(), node, NodeChange.RESTARTED, index, why)
        )
        self.cluster.start(node, wait=False)
        self.starting[node] = (index, why)

    def idle_until(self, until_s: float) -> None:
        while (remaining := until_s - self.recorder.now_s()) > 0:
            self.step(min(STEP_S, remaining))

    def wait_recovered(self, timeout_s: float, what: str) -> bool:
        """Wait until no fault is under way, every node is ready, and every node agrees
        that every partition has a leader and its full ISR. On timeout, note why not.

        Once a wait has given up, later ones settle for a leader for every partition:
        a cluster that does not get its ISR full again is noted once, not waited out
        before every fault (which could stretch a run past any time limit)."""
        deadline = time.monotonic() + timeout_s
        reason = "not asked yet"
        next_view = 0.0
        while time.monotonic() < deadline:
            self.step(STEP_S)
            if self.pending or self.starting or self.down or self.cuts or self.flaps:
                reason = "faults are still under way"
                continue
            if time.monotonic() < next_view:
                continue
            next_view = time.monotonic() + VIEW_EVERY_S
            addresses = {n: self.cluster.address(n) for n in self.cluster.node_ids}
            views = topic_views(addresses, self.topic)
            if self.full_isr_given_up:
                led = not leaderless(views, self.partitions) and len(views) == len(addresses)
                missing = None if led else "a partition has no leader (or a node no view)"
            else:
                missing = not_recovered(views, self.cluster.node_ids, self.partitions)
            if missing is None:
                return True
            reason = missing
        if not self.full_isr_given_up:
            reason += "; later waits settle for a leader for every partition"
            self.full_isr_given_up = True
        self.recorder.note("faults", f"{what}: not recovered within {timeout_s:g} s: {reason}")
        return False

    def isr_not_full(self, timeout_s: float) -> str | None:
        """Wait up to `timeout_s` until every node agrees that every partition has its
        full replica set in the ISR (whether or not earlier waits gave up on that); None
        then, or what was still missing."""
        deadline = time.monotonic() + timeout_s
        while True:
            addresses = {n: self.cluster.address(n) for n in self.cluster.node_ids}
            views = topic_views(addresses, self.topic)
            missing = not_recovered(views, self.cluster.node_ids, self.partitions)
            if missing is None or time.monotonic() >= deadline:
                return missing
            self.step(VIEW_EVERY_S)

    # --- healing ----------------------------------------------------------------------

    def heal(self) -> None:
        """End every fault now (the network whole again, in one step), restart every node
        that is not running, wait until all are ready and (failing a full recovery) every
        partition has a leader."""
        if self.network is not None:
            self.cuts.clear()
            self.flaps.clear()
            self.set_network(HEAL, "heal")
        for end in self.pending:
            if not end.action.is_network:
                self.end_fault(end.node, end.action, end.fault, end.why)
        self.pending.clear()
        for node_id in self.cluster.node_ids:
            if self.cluster.local.node(node_id).paused:
                self.end_fault(node_id, Action.PAUSE, HEAL, "heal")
            elif not self.cluster.is_running(node_id) and node_id not in self.starting:
                self.end_fault(node_id, Action.KILL, HEAL, "heal")
        self.down.clear()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self.starting:
            if time.monotonic() > deadline or self.down:
                raise ClusterTimeout(
                    f"nodes {sorted(self.starting) or sorted(self.down)} did not get ready "
                    f"after healing\n{self.cluster.logs()}"
                )
            self.step(STEP_S)
        if self.wait_recovered(RECOVERY_TIMEOUT_S, "healing"):
            return
        addresses = {n: self.cluster.address(n) for n in self.cluster.node_ids}
        self.cluster.wait_until(
            lambda: not leaderless(topic_views(addresses, self.topic), self.partitions),
            RECOVERY_TIMEOUT_S,
            "a leader for every partition after healing",
        )
