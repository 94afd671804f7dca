"""How long the metadata store takes to commit what the active controller proposes.

A store notes the time of each proposal it makes as leader and, once entries up to some
offset are committed, the time each one took. The times come in from the shell (a
monotonic clock in seconds); this module only counts them into histogram buckets, which
the metrics collector (strom.metrics.node) exports when it is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from dataclasses import dataclass

COMMIT_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Upper bounds in seconds: from a quorum of one on a fast disk to a quorum waiting out
a lost voter."""


@dataclass(frozen=True, slots=True)
class LatencySnapshot:
    """The histogram at one moment: counts per bucket (the last one past every bound)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total_seconds: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(upper bound, count at or below it) in Prometheus' form, `+Inf` last."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class CommitTimer:
    """Proposals awaiting their commit, and the histogram of how long commits took.

    Only a leader proposes; a store that stops leading calls `abandon`, so what waits
    here is never more than what the store itself holds uncommitted.
    """

    __slots__ = ("_bounds", "_counts", "_total", "_waiting")

    def __init__(self, bounds: tuple[float, ...] = COMMIT_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"bucket bounds must increase: {bounds}")
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._total = 0.0
        self._waiting: OrderedDict[int, float] = OrderedDict()

    def proposed(self, offset: int, now_s: float) -> None:
        self._waiting[offset] = now_s

    def committed(self, up_to: int, now_s: float) -> None:
        """Every proposal at or below offset `up_to` is committed now."""
        waiting = self._waiting
        while waiting:
            offset, since = next(iter(waiting.items()))
            if offset > up_to:
                break
            del waiting[offset]
            self.observe(max(0.0, now_s - since))

    def abandon(self) -> None:
        """Leadership is gone: what was proposed may never commit here."""
        self._waiting.clear()

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(self._bounds, seconds)] += 1
        self._total += seconds

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def snapshot(self) -> LatencySnapshot:
        return LatencySnapshot(self._bounds, tuple(self._counts), self._total)
