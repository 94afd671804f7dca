"""The arithmetic of client quota enforcement, as Kafka does it: a sampled rate and the
throttle time of a client over its quota, and KIP-599's token bucket for
`controller_mutation_rate`. Time comes in as `now_ms`; nothing here sleeps or throttles
(server/throttling.py holds a throttled client's connection, as Kafka mutes it).

Sampled rate (Kafka's Rate over a windowed sum). Values are added to the current sample;
a sample is complete `window_ms` after it started, and the next value starts a new one,
in a ring of `samples + 1`. A sample no value reached for `samples * window_ms` counts as
empty. The rate is the sum of the samples over the time since the oldest one started,
counted as at least `samples - 1` whole windows, so a client's first burst is not
measured over a few milliseconds:

    rate = sum / max(elapsed, (samples - 1) * window_ms)     (per second)

Throttle time: a client whose rate R is over its quota Q after a value is recorded waits
until its rate would be back at Q with nothing more recorded: over the same window W,
R * W / (W + X) = Q, so X = (R - Q) / Q * W, rounded to a millisecond (Java's rounding:
halves up). `request_percentage` caps it at one window (Kafka's request quota manager).

Token bucket (KIP-599): the bucket holds at most `samples * window_s * rate` tokens and
refills at `rate` tokens a second; each mutation takes one (a partition created or
deleted). A request is refused while the bucket is below zero (strict) — it may take the
bucket below zero, never before — and the client waits `-tokens / rate` seconds.

Defaults are Kafka's `quota.window.num=11` and `quota.window.size.seconds=1` (and the
same for `controller.quota.window.*`), which the broker's config may change. Both are
used by quota_sensors.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_SAMPLES",
    "DEFAULT_WINDOW_MS",
    "SampledRate",
    "TokenBucket",
    "java_round",
    "throttle_time_ms",
]

DEFAULT_SAMPLES = 11
DEFAULT_WINDOW_MS = 1000


def java_round(value: float) -> int:
    """Java's Math.round: the nearest integer, halves up."""
    return math.floor(value + 0.5)


def throttle_time_ms(rate: float, quota: float, window_ms: int) -> int:
    """How long a client measured at `rate` over `window_ms` waits to be back at `quota`;
    0 when it is not over it."""
    if rate <= quota:
        return 0
    return java_round((rate - quota) / quota * window_ms)


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_ms = now_ms
        self.value = 0.0


@dataclass(slots=True)
class SampledRate:
    """One client's rate for one quota (module docstring).

    Transitions: record(value, now) adds to the current sample, first starting the next
    one when the current is complete; a measure empties the samples that have expired."""

    samples: int = DEFAULT_SAMPLES
    window_ms: int = DEFAULT_WINDOW_MS
    _ring: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._ring:
            self._ring.append(_Sample(now_ms, now_ms))
        sample = self._ring[self._current]
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._ring):
                sample = _Sample(now_ms, now_ms)
                self._ring.append(sample)
            else:
                sample = self._ring[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        for sample in self._ring:
            if now_ms - sample.last_ms >= self.samples * self.window_ms:
                sample.reset(now_ms)

    def measured_window_ms(self, now_ms: int) -> int:
        """The time the rate is measured over now (Kafka's Rate.windowSize)."""
        self._purge(now_ms)
        if not self._ring:
            self._ring.append(_Sample(now_ms, now_ms))
        elapsed = now_ms - min(sample.start_ms for sample in self._ring)
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def total(self, now_ms: int) -> float:
        self._purge(now_ms)
        return sum(sample.value for sample in self._ring)

    def rate(self, now_ms: int) -> float:
        """The measured rate, per second."""
        total = self.total(now_ms)
        return total / (self.measured_window_ms(now_ms) / 1000.0)

    def record_and_throttle(
        self, value: float, now_ms: int, quota: float, *, max_throttle_ms: int | None = None
    ) -> int:
        """Record `value`, then the throttle time (ms) if the rate is over `quota`."""
        self.record(value, now_ms)
        rate = self.rate(now_ms)
        throttle = throttle_time_ms(rate, quota, self.measured_window_ms(now_ms))
        return throttle if max_throttle_ms is None else min(throttle, max_throttle_ms)


@dataclass(slots=True)
class TokenBucket:
    """KIP-599's bucket for one client's `controller_mutation_rate` (module docstring).

    Transitions: each call first refills the bucket for the time since the last one (up
    to the burst); `take` then removes tokens, which may leave it below zero."""

    samples: int = DEFAULT_SAMPLES
    window_ms: int = DEFAULT_WINDOW_MS
    tokens: float = 0.0
    last_ms: int = 0

    def burst(self, rate: float) -> float:
        return self.samples * (self.window_ms / 1000.0) * rate

    def _refill(self, now_ms: int, rate: float) -> None:
        self.tokens = min(self.burst(rate), self.tokens + rate * (now_ms - self.last_ms) / 1000.0)
        self.last_ms = now_ms

    def available(self, now_ms: int, rate: float) -> float:
        self._refill(now_ms, rate)
        return self.tokens

    def take(self, permits: float, now_ms: int, rate: float) -> None:
        """Record `permits` mutations without checking (Kafka's permissive quota)."""
        self._refill(now_ms, rate)
        self.tokens = min(self.burst(rate), self.tokens - permits)

    def throttle_ms(self, now_ms: int, rate: float) -> int:
        """How long until the bucket is back at zero; 0 when it is not below."""
        tokens = self.available(now_ms, rate)
        return 0 if tokens >= 0 else java_round(-tokens / rate * 1000)

    def try_take(self, permits: float, now_ms: int, rate: float) -> int | None:
        """Kafka's strict quota: while the bucket is below zero the request is refused,
        with the throttle time (which rounds to 0 a hair below zero, as in Kafka); else
        the permits are taken, even if that takes it below zero, and None returned."""
        if self.available(now_ms, rate) < 0:
            return self.throttle_ms(now_ms, rate)
        self.take(permits, now_ms, rate)
        return None
