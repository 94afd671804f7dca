"""Applies a Schedule to a running TestCluster from the main thread, and heals it.

A fault resolves its target when it fires (the leader of a partition is whoever the
freshest metadata names then), kills or pauses that node, and ends `down_s` later with a
restart or SIGCONT. Each change is recorded as a NodeChanged with the schedule entry and
the node it resolved to. While it waits, the injector keeps reading the nodes' stdout
(a full pipe would stop a node) and notes when a restarted node is ready again.

Every wait has a deadline: a fault that waits for recovery gives up after
RECOVERY_TIMEOUT_S (with a Note) and fires anyway, and later waits then ask only for a
leader for every partition; healing raises ClusterTimeout if even that does not come.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from random import Random

from cluster import ClusterTimeout, TestCluster

from .cluster_view import active_controller, freshest, leaderless, not_recovered, topic_views
from .history import NodeChange, NodeChanged
from .schedule import Action, Fault, Schedule, TargetKind
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


class FaultInjector:
    """Nodes are up, down (killed or paused by a fault) or starting (restarted, not yet
    ready); a node is the target of one fault at a time."""

    def __init__(
        self,
        cluster: TestCluster,
        schedule: Schedule,
        recorder: Recorder,
        *,
        topic: str,
        partitions: list[int],
    ) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.recorder = recorder
        self.topic = topic
        self.partitions = partitions
        self.rng = Random(schedule.seed)
        self.down: dict[int, Action] = {}
        self.starting: dict[int, tuple[int, str]] = {}
        self.pending: list[_PendingEnd] = []
        self.shift_s = 0.0
        """How much later than planned the faults fire, after waits for recovery."""
        self.full_isr_given_up = False

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
        last_end_s = max((end.due_s for end in self.pending), default=0.0)
        self.idle_until(max(self.schedule.duration_s + self.shift_s, last_end_s))

    def apply(self, index: int, fault: Fault) -> None:
        node, how = self.resolve(fault)
        if node is None:
            self.recorder.note("faults", f"fault #{index} ({fault.describe()}) skipped: {how}")
            return
        why = f"#{index} {fault.describe()}{how}"
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
            controller = active_controller(addresses)
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
            if self.pending or self.starting or self.down:
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

    # --- healing ----------------------------------------------------------------------

    def heal(self) -> None:
        """End every fault now, restart every node that is not running, wait until all
        are ready and (failing a full recovery) every partition has a leader."""
        for end in self.pending:
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
