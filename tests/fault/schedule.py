"""Fault schedules: what to do to which node when, as values, and seeded generators.

A Fault is (at_s, action, target, down_s): at `at_s` seconds into the run, kill -9 the
target (and restart it `down_s` later) or SIGSTOP it (and SIGCONT it `down_s` later).
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
        return f"{self.action.value} {self.target.describe()} for {self.down_s:g} s"


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
