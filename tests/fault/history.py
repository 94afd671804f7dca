"""What happened during a fault run, as values: the History the checker judges.

Events carry `at_s`, seconds on the monotonic clock since the run started. Producers
append Sent (the write was handed to the client) and then Acked or Failed (its delivery
report); a write with neither by the end has an unknown outcome. Consumers append Read.
The runner appends NodeChanged for every fault it applies or heals (with the schedule
entry that caused it, targets already resolved), NetworkChanged for every change of the
network's cuts (the whole new set, and the fault that changed it), and Note for anything
worth reading when a run fails (a client error, a wait that gave up); FatalError when a
producer's client gave up and was replaced. The final log is every
partition read back from its start to the high watermark after healing.

Nothing here does I/O: to_json/from_json turn a History into plain JSON values and back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


class NodeChange(Enum):
    """What a fault did to a node. KILLED and PAUSED are stamped once done (the node may
    have answered until then), RESTARTED and RESUMED before they start (it may answer from
    then on): a down window is never longer than the real one."""

    KILLED = "killed"
    PAUSED = "paused"
    RESTARTED = "restarted"
    RESUMED = "resumed"
    READY = "ready"

    @property
    def takes_down(self) -> bool:
        return self in (NodeChange.KILLED, NodeChange.PAUSED)

    @property
    def brings_up(self) -> bool:
        return self in (NodeChange.RESTARTED, NodeChange.RESUMED)


@dataclass(frozen=True, slots=True)
class Sent:
    at_s: float
    producer: str
    seq: int
    partition: int
    value: str


@dataclass(frozen=True, slots=True)
class Acked:
    """A successful delivery report. `offset` is None when the client acknowledged the
    write without learning its offset: librdkafka's idempotent producer does that for
    writes of a batch whose answer it lost when a later batch of the same partition was
    acknowledged (an implicit ack); the checker then looks the write up by value."""

    at_s: float
    producer: str
    partition: int
    value: str
    offset: int | None


@dataclass(frozen=True, slots=True)
class Failed:
    at_s: float
    producer: str
    partition: int
    value: str
    error: str


@dataclass(frozen=True, slots=True)
class Read:
    at_s: float
    consumer: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class NodeChanged:
    at_s: float
    node: int
    change: NodeChange
    fault: int
    """The index of the schedule entry that did it; -1 when healing at the end."""
    why: str
    """The schedule entry as resolved, e.g. "kill leader of partition 0 (node 2) for 3 s"."""


@dataclass(frozen=True, slots=True)
class NetworkChanged:
    """The network's cuts changed (stamped once the new rules are in place). `cuts` is the
    whole new set as (a, b) pairs of endpoints, a < b: node ids, and 0 for the ZooKeeper
    server; empty when the network is whole again (a heal)."""

    at_s: float
    cuts: tuple[tuple[int, int], ...]
    fault: int
    """The index of the schedule entry that did it; -1 when healing at the end."""
    why: str
    """What changed it, e.g. "#0 cut leader of partition 0 ... (node 2, epoch 1)" when a
    fault begins, "end of #0 ..." when it ends."""

    def describe(self) -> str:
        def name(endpoint: int) -> str:
            return "zk" if endpoint == 0 else str(endpoint)

        cuts = " ".join(f"{name(a)}-{name(b)}" for a, b in self.cuts)
        return f"network cut {cuts}" if cuts else "network whole"


@dataclass(frozen=True, slots=True)
class FatalError:
    """A producer's client gave up with a fatal error (an idempotent producer's sequence
    out of sync, say); the worker carries on with a new client."""

    at_s: float
    producer: str
    error: str


@dataclass(frozen=True, slots=True)
class Note:
    at_s: float
    source: str
    text: str


Event = Sent | Acked | Failed | Read | NodeChanged | NetworkChanged | FatalError | Note

_EVENT_TYPES: dict[str, type[Event]] = {
    "sent": Sent,
    "acked": Acked,
    "failed": Failed,
    "read": Read,
    "node": NodeChanged,
    "network": NetworkChanged,
    "fatal": FatalError,
    "note": Note,
}
_TYPE_NAMES = {cls: name for name, cls in _EVENT_TYPES.items()}


@dataclass(frozen=True, slots=True)
class FinalRecord:
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class TopicSetup:
    """The topic under test and its replica assignment when it was created."""

    topic: str
    replicas: dict[int, tuple[int, ...]]
    """partition -> replica node ids."""
    min_insync_replicas: int
    nodes: tuple[int, ...]

    @property
    def partitions(self) -> list[int]:
        return sorted(self.replicas)


@dataclass(slots=True)
class History:
    """A run's record: appended to while it runs, judged by checker.check() afterwards."""

    setup: TopicSetup
    events: list[Event] = field(default_factory=list)
    final_log: dict[int, list[FinalRecord]] = field(default_factory=dict)
    """partition -> its records from the log start to the high watermark, in offset order."""

    def of_type(self, kind: type[Event]) -> list[Event]:
        return [event for event in self.events if isinstance(event, kind)]


# --- JSON -------------------------------------------------------------------------------


def event_to_json(event: Event) -> dict[str, Any]:
    data: dict[str, Any] = {"type": _TYPE_NAMES[type(event)]}
    for spec in fields(event):
        value = getattr(event, spec.name)
        data[spec.name] = value.value if isinstance(value, Enum) else value
    return data


def event_from_json(data: dict[str, Any]) -> Event:
    values = dict(data)
    cls = _EVENT_TYPES[values.pop("type")]
    if cls is NodeChanged:
        values["change"] = NodeChange(values["change"])
    if cls is NetworkChanged:
        values["cuts"] = tuple((int(a), int(b)) for a, b in values["cuts"])
    return cls(**values)


def to_json(history: History) -> dict[str, Any]:
    setup = history.setup
    return {
        "setup": {
            "topic": setup.topic,
            "replicas": {str(p): list(nodes) for p, nodes in setup.replicas.items()},
            "min_insync_replicas": setup.min_insync_replicas,
            "nodes": list(setup.nodes),
        },
        "events": [event_to_json(event) for event in history.events],
        "final_log": {
            str(partition): [[record.offset, record.value] for record in records]
            for partition, records in history.final_log.items()
        },
    }


def from_json(data: dict[str, Any]) -> History:
    setup = data["setup"]
    return History(
        setup=TopicSetup(
            topic=setup["topic"],
            replicas={int(p): tuple(nodes) for p, nodes in setup["replicas"].items()},
            min_insync_replicas=int(setup["min_insync_replicas"]),
            nodes=tuple(setup["nodes"]),
        ),
        events=[event_from_json(event) for event in data["events"]],
        final_log={
            int(partition): [FinalRecord(int(offset), value) for offset, value in records]
            for partition, records in data["final_log"].items()
        },
    )
