"""Fault schedules: what to do to which node when, as values, and seeded generators.

A Fault is (at_s, action, target, down_s): at `at_s` seconds into the run, kill -9 the
target (and restart it `down_s` later) or SIGSTOP it (and SIGCONT it `down_s` later), or
cut the network around it (and heal it `down_s` later): cut it from the other nodes,
isolate it from them and ZooKeeper, split it and ZooKeeper from the others, make it the
bridge between the others, or flap the network (a new random topology every 1-4 s).
The target is a node id or a role resolved when the fault fires: the leader of a
partition, the active controller, a random live node, or a random live follower of a
partition. A fault with `after_recovery` first waits until the previous faults are healed
and every partition has its leader and full ISR again, then one second more (so the
recovered leaders take some writes); the wait shifts every later fault.

Generators take a seed and return the same schedule for the same arguments, so a schedule
is replayed by its seed or by the JSON a failing run wrote (to_json/from_json).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from random import Random
from typing import Any


class Action(Enum):
    KILL = "kill"
    """kill -9, then restart after down_s."""
    PAUSE = "pause"
    """SIGSTOP, then SIGCONT after down_s."""
    CUT = "cut"
    """Cut the target from the other nodes (ZooKeeper still reaches everyone)."""
    ISOLATE = "isolate"
    """Cut the target from the other nodes and from ZooKeeper (on Raft: a cut)."""
    SPLIT = "split"
    """The target with ZooKeeper on one side, the other nodes on the other (on Raft: a
    cut): the majority of the nodes loses ZooKeeper."""
    BRIDGE = "bridge"
    """The target sees every node; the other nodes, in two halves, do not see the other
    half (with three nodes: A - target - C). ZooKeeper reaches everyone."""
    FLAP = "flap"
    """A new random topology every FLAP_STEP_S for down_s (the target is not used)."""

    @property
    def is_network(self) -> bool:
        return self not in (Action.KILL, Action.PAUSE)


FLAP_STEP_S = (1.0, 4.0)
"""How long each topology of a flapping network lasts (uniform)."""


class TargetKind(Enum):
    NODE = "node"
    LEADER = "leader"
    CONTROLLER = "controller"
    RANDOM = "random"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class Target:
    kind: TargetKind
    node: int | None = None
    partition: int | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        """A target from its text: "3" (node 3), "leader:0", "follower:0", "controller"
        or "random"."""
        kind, _, argument = text.partition(":")
        if kind.isdigit():
            return cls(TargetKind.NODE, node=int(kind))
        target_kind = TargetKind(kind)
        if target_kind in (TargetKind.LEADER, TargetKind.FOLLOWER):
            return cls(target_kind, partition=int(argument))
        return cls(target_kind)

    def __str__(self) -> str:
        if self.kind is TargetKind.NODE:
            return str(self.node)
        if self.partition is not None:
            return f"{self.kind.value}:{self.partition}"
        return str(self.kind.value)

    def describe(self) -> str:
        if self.kind is TargetKind.NODE:
            return f"node {self.node}"
        if self.kind is TargetKind.LEADER:
            return f"leader of partition {self.partition}"
        if self.kind is TargetKind.FOLLOWER:
            return f"a follower of partition {self.partition}"
        if self.kind is TargetKind.CONTROLLER:
            return "active controller"
        return "a random node"


def node(node_id: int) -> Target:
    return Target(TargetKind.NODE, node=node_id)


def leader(partition: int) -> Target:
    return Target(TargetKind.LEADER, partition=partition)


def follower(partition: int) -> Target:
    return Target(TargetKind.FOLLOWER, partition=partition)


CONTROLLER = Target(TargetKind.CONTROLLER)
RANDOM = Target(TargetKind.RANDOM)


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    action: Action
    target: Target
    down_s: float
    after_recovery: bool = False

    def describe(self) -> str:
        what = {
            Action.CUT: "cut {} from the other nodes",
            Action.ISOLATE: "isolate {} from the other nodes and ZooKeeper",
            Action.SPLIT: "split {} and ZooKeeper from the other nodes",
            Action.BRIDGE: "bridge the network through {}",
            Action.FLAP: "flap the network",
        }.get(self.action, f"{self.action.value} {{}}")
        return f"{what.format(self.target.describe())} for {self.down_s:g} s"


@dataclass(frozen=True, slots=True)
class Schedule:
    name: str
    seed: int
    duration_s: float
    """Producers and consumers run at least this long (more if faults or waits run over)."""
    faults: tuple[Fault, ...]

    def describe(self) -> str:
        lines = [f"schedule {self.name!r}, seed {self.seed}, {self.duration_s:g} s:"]
        lines += [
            f"  {f.at_s:6.2f}s {f.describe()}{' (after recovery)' if f.after_recovery else ''}"
            for f in self.faults
        ]
        return "\n".join(lines)


# --- generators -----------------------------------------------------------------------


def kill_every(
    seconds: float,
    seed: int,
    *,
    every_s: float = 10.0,
    nodes: tuple[int, ...] = (1, 2, 3),
    down_s: tuple[float, float] = (2.0, 7.0),
) -> Schedule:
    """kill -9 a random node about every `every_s` (±20 %), restarting it after a random
    time in `down_s`, each once the previous one has recovered. With the harness's 4 s
    session timeout, about half the kills outlast the session: the controller fences the
    node and its partitions get new leaders; the others come back before it notices."""
    rng = Random(seed)
    faults = []
    at_s = every_s / 2
    while at_s < seconds - every_s / 2:
        faults.append(
            Fault(
                at_s=round(at_s, 2),
                action=Action.KILL,
                target=node(rng.choice(nodes)),
                down_s=round(rng.uniform(*down_s), 2),
                after_recovery=True,
            )
        )
        at_s += every_s * rng.uniform(0.8, 1.2)
    return Schedule("kill_every", seed, seconds, tuple(faults))


def chase_leader(
    times: int = 5,
    partition: int = 0,
    *,
    seed: int = 0,
    down_s: float = 6.0,
    first_at_s: float = 3.0,
    gap_s: float = 1.0,
) -> Schedule:
    """kill -9 the current leader of `partition` `times` times in a row, each once the
    previous victim is back, recovered and (with preferred leaders) leading again. The
    default `down_s` outlasts the harness's 4 s session timeout, so every kill makes the
    controller elect another leader, and every return moves the leadership back."""
    return _at_the_leader(
        "chase_leader", Action.KILL, times, partition, seed, down_s, first_at_s, gap_s
    )


def pause_leader(
    times: int = 1,
    partition: int = 0,
    *,
    seed: int = 0,
    pause_s: float = 15.0,
    first_at_s: float = 3.0,
    gap_s: float = 3.0,
) -> Schedule:
    """SIGSTOP the current leader of `partition` for `pause_s`, then SIGCONT it: it wakes
    up believing it still leads. The default is well past the harness's 4 s session
    timeout: the controller fences the node after 4 s (after a controller election
    first, if the node was also the active controller), and producers, whose requests to
    the silent leader time out after 5 s, find the new leader only at their next
    timeout, about 10 s in; the new leader then takes writes for a few seconds."""
    return _at_the_leader(
        "pause_leader", Action.PAUSE, times, partition, seed, pause_s, first_at_s, gap_s
    )


def _at_the_leader(
    name: str,
    action: Action,
    times: int,
    partition: int,
    seed: int,
    down_s: float,
    first_at_s: float,
    gap_s: float,
) -> Schedule:
    """`action` on the current leader of `partition`, `times` times, each once the
    previous target has recovered."""
    faults = tuple(
        Fault(
            at_s=first_at_s + i * (down_s + gap_s),
            action=action,
            target=leader(partition),
            down_s=down_s,
            after_recovery=True,
        )
        for i in range(times)
    )
    return Schedule(name, seed, first_at_s + times * (down_s + gap_s), faults)


def majority_down(
    partition: int = 0, *, seed: int = 0, at_s: float = 4.0, down_s: float = 10.0
) -> Schedule:
    """kill -9 both followers of `partition` at once (two of three replicas, and with
    combined nodes two of three controllers), restarting them after `down_s`: the leader
    is left alone, below min.insync.replicas=2."""
    faults = tuple(
        Fault(at_s=at_s, action=Action.KILL, target=follower(partition), down_s=down_s)
        for _ in range(2)
    )
    return Schedule("majority_down", seed, at_s + down_s + 4.0, faults)


def mixed(seconds: float, seed: int, *, every_s: float = 10.0, partitions: int = 3) -> Schedule:
    """The soak's schedule: about every `every_s`, one of: kill a random node, kill the
    leader of a random partition, kill the active controller, pause the leader of a random
    partition past the session timeout, or kill two followers of a partition at once."""
    rng = Random(seed)
    faults: list[Fault] = []
    at_s = every_s / 2
    while at_s < seconds - every_s:
        partition = rng.randrange(partitions)
        choice = rng.randrange(5)
        down_s = round(rng.uniform(2.0, 7.0), 2)
        if choice == 0:
            faults.append(Fault(at_s, Action.KILL, RANDOM, down_s, after_recovery=True))
        elif choice == 1:
            faults.append(Fault(at_s, Action.KILL, leader(partition), down_s, True))
        elif choice == 2:
            faults.append(Fault(at_s, Action.KILL, CONTROLLER, down_s, True))
        elif choice == 3:
            faults.append(Fault(at_s, Action.PAUSE, leader(partition), 15.0, True))
        else:
            faults.append(Fault(at_s, Action.KILL, follower(partition), 6.0, True))
            faults.append(Fault(at_s, Action.KILL, follower(partition), 6.0))
        at_s = round(at_s + every_s * rng.uniform(0.8, 1.2), 2)
    return Schedule("mixed", seed, seconds, tuple(faults))


# --- network faults ---------------------------------------------------------------------


def cut_leader(
    times: int = 1,
    partition: int = 0,
    *,
    seed: int = 0,
    cut_s: tuple[float, float] = (5.0, 15.0),
    first_at_s: float = 3.0,
    gap_s: float = 3.0,
) -> Schedule:
    """Cut the current leader of `partition` from the other nodes (the clients still
    reach it, and on ZooKeeper so does ZooKeeper) for a random time in `cut_s`, `times`
    times, each once the previous cut has healed and the cluster recovered."""
    rng = Random(seed)
    faults = []
    at_s = first_at_s
    for _ in range(times):
        down_s = round(rng.uniform(*cut_s), 2)
        faults.append(Fault(at_s, Action.CUT, leader(partition), down_s, after_recovery=True))
        at_s = round(at_s + down_s + gap_s, 2)
    return Schedule("cut_leader", seed, at_s, tuple(faults))


def cut_controller(
    times: int = 1, *, seed: int = 0, cut_s: float = 8.0, first_at_s: float = 3.0
) -> Schedule:
    """Isolate the active controller from the other nodes and from ZooKeeper (its session
    expires, so a ZooKeeper controller loses its role too) for `cut_s`, well past the
    4 s session timeout, `times` times, each once the previous cut has healed."""
    faults = tuple(
        Fault(first_at_s + i * (cut_s + 3.0), Action.ISOLATE, CONTROLLER, cut_s, True)
        for i in range(times)
    )
    return Schedule("cut_controller", seed, first_at_s + times * (cut_s + 3.0), faults)


def split_one_two(
    times: int = 2, *, seed: int = 0, cut_s: tuple[float, float] = (6.0, 10.0)
) -> Schedule:
    """Split a random node from the other two (the clients reach both sides), `times`
    times, each once the previous split has healed: on ZooKeeper, ZooKeeper is on the
    side of the two at the first split (ISOLATE) and on the side of the lone node at the
    second (SPLIT), and so on alternately; on Raft both are a 1 | 2 split."""
    rng = Random(seed)
    faults = []
    at_s = 3.0
    for i in range(times):
        down_s = round(rng.uniform(*cut_s), 2)
        action = Action.ISOLATE if i % 2 == 0 else Action.SPLIT
        faults.append(Fault(at_s, action, RANDOM, down_s, after_recovery=True))
        at_s = round(at_s + down_s + 3.0, 2)
    return Schedule("split_one_two", seed, at_s, tuple(faults))


def bridge(times: int = 1, partition: int = 0, *, seed: int = 0, cut_s: float = 10.0) -> Schedule:
    """A bridge through a follower of `partition`: it sees both other nodes, which do not
    see each other, so the partition's leader is at one end (and cannot reach the other
    end) for `cut_s`, `times` times."""
    faults = tuple(
        Fault(3.0 + i * (cut_s + 3.0), Action.BRIDGE, follower(partition), cut_s, True)
        for i in range(times)
    )
    return Schedule("bridge", seed, 3.0 + times * (cut_s + 3.0), faults)


def flapping(seconds: float = 20.0, *, seed: int = 0, first_at_s: float = 3.0) -> Schedule:
    """The network flaps for `seconds`: a new random topology (isolations, splits,
    bridges, random cuts, the whole network; network.random_topology) every 1-4 s, all
    drawn from the seed."""
    faults = (Fault(first_at_s, Action.FLAP, RANDOM, seconds, after_recovery=True),)
    return Schedule("flapping", seed, first_at_s + seconds + 2.0, faults)


def cut_and_kill(seed: int = 0, *, partitions: int = 3) -> Schedule:
    """Cuts and kill -9 together, twice: the leader of a random partition cut from the
    other nodes for 8-12 s, and 2-4 s in a random node killed for 3-6 s (the cut one,
    at times); then a flapping network for 10 s with a random node killed for 3-6 s
    3-5 s in."""
    rng = Random(seed)
    cut_s = round(rng.uniform(8.0, 12.0), 2)
    kill_at_s = round(3.0 + rng.uniform(2.0, 4.0), 2)
    flap_at_s = round(3.0 + cut_s + 3.0, 2)
    faults = (
        Fault(3.0, Action.CUT, leader(rng.randrange(partitions)), cut_s, after_recovery=True),
        Fault(kill_at_s, Action.KILL, RANDOM, round(rng.uniform(3.0, 6.0), 2)),
        Fault(flap_at_s, Action.FLAP, RANDOM, 10.0, after_recovery=True),
        Fault(
            round(flap_at_s + rng.uniform(3.0, 5.0), 2),
            Action.KILL,
            RANDOM,
            round(rng.uniform(3.0, 6.0), 2),
        ),
    )
    return Schedule("cut_and_kill", seed, flap_at_s + 12.0, faults)


def network_mixed(
    seconds: float, seed: int, *, every_s: float = 12.0, partitions: int = 3
) -> Schedule:
    """The network soak's schedule: about every `every_s`, once the cluster has recovered,
    one of: cut a partition's leader, isolate the active controller, isolate a random
    node, split a random node and ZooKeeper from the others, a bridge through a random
    node, a flapping network, a cut leader with a random node killed meanwhile, or a
    random node killed."""
    rng = Random(seed)
    faults: list[Fault] = []
    at_s = every_s / 2
    while at_s < seconds - every_s:
        partition = rng.randrange(partitions)
        choice = rng.randrange(8)
        down_s = round(rng.uniform(5.0, 12.0), 2)
        if choice == 0:
            faults.append(Fault(at_s, Action.CUT, leader(partition), down_s, True))
        elif choice == 1:
            faults.append(Fault(at_s, Action.ISOLATE, CONTROLLER, down_s, True))
        elif choice == 2:
            faults.append(Fault(at_s, Action.ISOLATE, RANDOM, down_s, True))
        elif choice == 3:
            faults.append(Fault(at_s, Action.SPLIT, RANDOM, down_s, True))
        elif choice == 4:
            faults.append(Fault(at_s, Action.BRIDGE, RANDOM, down_s, True))
        elif choice == 5:
            faults.append(Fault(at_s, Action.FLAP, RANDOM, down_s, True))
        elif choice == 6:
            faults.append(Fault(at_s, Action.CUT, leader(partition), down_s, True))
            kill_s = round(rng.uniform(2.0, 7.0), 2)
            faults.append(Fault(round(at_s + 2.0, 2), Action.KILL, RANDOM, kill_s))
        else:
            faults.append(Fault(at_s, Action.KILL, RANDOM, round(down_s / 2, 2), True))
        at_s = round(at_s + max(every_s, down_s + 3.0) * rng.uniform(0.9, 1.2), 2)
    return Schedule("network_mixed", seed, seconds, tuple(faults))


# --- JSON -------------------------------------------------------------------------------


def to_json(schedule: Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "seed": schedule.seed,
        "duration_s": schedule.duration_s,
        "faults": [
            {
                "at_s": f.at_s,
                "action": f.action.value,
                "target": str(f.target),
                "down_s": f.down_s,
                "after_recovery": f.after_recovery,
            }
            for f in schedule.faults
        ],
    }


def from_json(data: dict[str, Any]) -> Schedule:
    return Schedule(
        name=data["name"],
        seed=int(data["seed"]),
        duration_s=float(data["duration_s"]),
        faults=tuple(
            Fault(
                at_s=float(f["at_s"]),
                action=Action(f["action"]),
                target=Target.parse(f["target"]),
                down_s=float(f["down_s"]),
                after_recovery=bool(f.get("after_recovery", False)),
            )
            for f in data["faults"]
        ),
    )
