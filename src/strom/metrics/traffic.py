"""Bytes and records per topic, counted where produces, fetches and replication move them.

The hot paths add plain integers here (well under a microsecond); the metrics collector
(strom.metrics.node) turns the totals into Prometheus counters when it is scraped.
"""

from __future__ import annotations

from collections.abc import Iterator


class Tally:
    """Per topic: bytes and records since the node started."""

    __slots__ = ("_totals",)

    def __init__(self) -> None:
        self._totals: dict[str, list[int]] = {}

    def add(self, topic: str, size: int, records: int) -> None:
        totals = self._totals.get(topic)
        if totals is None:
            totals = self._totals[topic] = [0, 0]
        totals[0] += size
        totals[1] += records

    def items(self) -> Iterator[tuple[str, int, int]]:
        """(topic, bytes, records) for every topic counted so far."""
        for topic, (size, records) in list(self._totals.items()):
            yield topic, size, records


class NodeCounters:
    """What the node counts whether or not its metrics are served: plain integers,
    turned into Prometheus counters only by strom.metrics.node when they are."""

    __slots__ = ("isr_expands", "isr_shrinks", "traffic")

    def __init__(self) -> None:
        self.traffic = TopicTraffic()
        self.isr_shrinks = 0
        self.isr_expands = 0

    def isr_changed(self, shrank: bool, grew: bool) -> None:
        """The ISR of a partition led here lost members, gained members, or both."""
        self.isr_shrinks += shrank
        self.isr_expands += grew


class TopicTraffic:
    """What moved through this node, per topic and direction."""

    __slots__ = ("consumed", "produced", "replicated_in", "replicated_out")

    def __init__(self) -> None:
        self.produced = Tally()
        """Appended by produce requests (as leader)."""
        self.consumed = Tally()
        """Sent to consumers' fetches; records counted as offsets passed."""
        self.replicated_out = Tally()
        """Sent to followers' fetches."""
        self.replicated_in = Tally()
        """Copied from the leader (as follower)."""
