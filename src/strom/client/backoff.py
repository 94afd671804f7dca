"""Reconnect backoff, as Kafka's clients compute it (reconnect.backoff.ms / .max.ms).

Exponential in the number of consecutive failed attempts, capped, with +-jitter so that
nodes that lost the same peer do not all retry in the same instant. No I/O; the caller
passes its own random.Random.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from random import Random


@dataclass(frozen=True, slots=True)
class ReconnectBackoff:
    initial_s: float = 0.05
    max_s: float = 1.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (0 < self.initial_s <= self.max_s and self.multiplier >= 1):
            raise ValueError(f"bad backoff {self}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"backoff jitter {self.jitter} is outside [0, 1)")

    def delay_s(self, failures: int, rng: Random) -> float:
        """Seconds between attempts after `failures` earlier consecutive failures.

        0 gives the initial backoff: Kafka waits that long after a first failed attempt,
        and after a connection that worked is lost.
        """
        exponent = (
            0 if self.multiplier == 1 else math.log(self.max_s / self.initial_s, self.multiplier)
        )
        term = min(
            self.initial_s * self.multiplier ** min(failures, math.ceil(exponent)), self.max_s
        )
        if self.jitter == 0:
            return term
        return term * rng.uniform(1 - self.jitter, 1 + self.jitter)
