"""Hand-made histories for the checker's tests, written the way the harness records one,
on a manual clock."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/, where the fault package is

from fault.checker import AnomalyKind, CheckResult
from fault.history import (
    Acked,
    Event,
    Failed,
    FinalRecord,
    History,
    NetworkChanged,
    NodeChange,
    NodeChanged,
    Read,
    Sent,
    TopicSetup,
)

SETUP = TopicSetup(
    topic="t", replicas={0: (1, 2, 3), 1: (2, 3, 1)}, min_insync_replicas=2, nodes=(1, 2, 3)
)


class Builder:
    """A history written the way the harness records one, on a manual clock."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.now_s = 0.0
        self.seqs: dict[str, int] = {}

    def tick(self, seconds: float = 0.1) -> float:
        self.now_s = round(self.now_s + seconds, 4)
        return self.now_s

    def send(self, producer: str, partition: int) -> str:
        seq = self.seqs.get(producer, 0)
        self.seqs[producer] = seq + 1
        value = f"{producer}-{seq}"
        self.events.append(Sent(self.tick(), producer, seq, partition, value))
        return value

    def ack(self, value: str, partition: int, offset: int | None) -> None:
        producer = value.split("-")[0]
        self.events.append(Acked(self.tick(), producer, partition, value, offset))

    def fail(self, value: str, partition: int) -> None:
        producer = value.split("-")[0]
        self.events.append(Failed(self.tick(), producer, partition, value, "_MSG_TIMED_OUT"))

    def write(self, producer: str, partition: int, offset: int) -> str:
        value = self.send(producer, partition)
        self.ack(value, partition, offset)
        return value

    def read(self, consumer: str, partition: int, offset: int, value: str) -> None:
        self.events.append(Read(self.tick(), consumer, partition, offset, value))

    def node(self, node: int, change: NodeChange, why: str = "#0 kill node") -> None:
        self.events.append(NodeChanged(self.tick(), node, change, 0, why))

    def network(self, *cuts: tuple[int, int], why: str = "#0 cut node 1") -> float:
        at_s = self.tick()
        self.events.append(NetworkChanged(at_s, tuple(cuts), 0, why))
        return at_s

    def history(self, final: dict[int, list[str]]) -> History:
        final_log = {
            p: [FinalRecord(offset, value) for offset, value in enumerate(values)]
            for p, values in final.items()
        }
        return History(SETUP, list(self.events), final_log)


def kinds(result: CheckResult) -> list[AnomalyKind]:
    return [anomaly.kind for anomaly in result.anomalies]
