"""How many connections a broker takes, and how fast: Kafka's connection quotas.

Pure: no I/O, no clock (the shell passes `now_ms`). The shell asks, for each new
connection on a client listener, in this order (Kafka's `ConnectionQuotas.inc`):

    delay_ms = quotas.throttle_ms(listener, now_ms)  # creation rate: wait this long first
    quotas.has_slot(listener)                        # max.connections: wait while False
    quotas.open(listener, ip) -> bool                # max.connections.per.ip: False closes it
    ...
    quotas.close(listener, ip)                       # when the connection ends

Kafka's rules:

- `max.connections` bounds the broker's connections, `listener.name.<l>.max.connections`
  one listener's. A connection that finds no slot waits (Kafka's acceptor stops taking
  connections) until one closes or the limit is raised.
- The inter-broker listener is protected when the broker has several listeners: the
  broker-wide limit and rate never hold its connections back. When one of them takes
  the broker over its limit, the least recently used connection of another listener is
  closed (`over_limit`).
- `max.connections.per.ip` (and `max.connections.per.ip.overrides`, by address) bounds
  one address's connections across all listeners; one more is closed at once.
- `max.connection.creation.rate` bounds new connections per second broker-wide,
  `listener.name.<l>.max.connection.creation.rate` per listener; a connection over the
  rate waits until it fits, at most one quota window (1 s), as Kafka caps its throttle.

New connections are paced 1/rate seconds apart, so no second lets more than `rate` in.
Kafka measures the rate over 11 one-second samples and so lets a short burst through
before it throttles; over a busy minute both let the same number in. The shell takes a
listener's new connections through the throttle one at a time, as Kafka's acceptor does.

Legal transitions of one connection: throttled -> (waiting for a slot) -> open -> closed;
`open` refused leaves the counts as they were.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["UNLIMITED", "WINDOW_MS", "ConnectionLimits", "ConnectionQuotas"]

UNLIMITED = 2**31 - 1
"""Kafka's default for every connection limit: Int.MaxValue, no limit."""
WINDOW_MS = 1000
"""The rate window, and the longest a connection is held back by a rate."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits as configured; every default is UNLIMITED."""

    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    per_ip_overrides: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Address (as the shell writes a peer's address) -> its own limit."""
    max_creation_rate: int = UNLIMITED
    listener_max_connections: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    listener_max_creation_rate: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    protected_listener: str | None = None
    """The inter-broker listener, when the broker has other client listeners too."""

    def per_ip(self, ip: str) -> int:
        return self.per_ip_overrides.get(ip, self.max_connections_per_ip)


class _Rate:
    """New connections paced 1/limit seconds apart (a cell-rate meter): never more than
    `limit` in any second."""

    def __init__(self) -> None:
        self.next_free_ms = 0.0

    def next_ms(self, limit: int, now_ms: int) -> int:
        """The earliest time from `now_ms` on that one more connection may come in."""
        if limit >= UNLIMITED:
            return now_ms
        if limit <= 0:
            return now_ms + WINDOW_MS
        return max(now_ms, math.ceil(self.next_free_ms))

    def record(self, limit: int, at_ms: int) -> None:
        if 0 < limit < UNLIMITED:
            self.next_free_ms = max(self.next_free_ms, at_ms) + WINDOW_MS / limit


class ConnectionQuotas:
    """The connections a broker holds, by address and listener, against its limits."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.by_ip: dict[str, int] = {}
        self.by_listener: dict[str, int] = {}
        self._broker_rate = _Rate()
        self._listener_rates: dict[str, _Rate] = {}

    def reconfigure(self, limits: ConnectionLimits) -> None:
        """New limits; the connections already open stay (Kafka closes none either)."""
        self.limits = limits

    def _protected(self, listener: str) -> bool:
        return listener == self.limits.protected_listener

    def throttle_ms(self, listener: str, now_ms: int) -> int:
        """Records a new connection on `listener` against the creation rates and says
        how long it must wait first (0: at once; at most WINDOW_MS)."""
        limits = self.limits
        listener_limit = limits.listener_max_creation_rate.get(listener, UNLIMITED)
        listener_rate = self._listener_rates.setdefault(listener, _Rate())
        at_ms = listener_rate.next_ms(listener_limit, now_ms)
        broker_limit = UNLIMITED if self._protected(listener) else limits.max_creation_rate
        at_ms = max(at_ms, self._broker_rate.next_ms(broker_limit, now_ms))
        at_ms = min(at_ms, now_ms + WINDOW_MS)
        listener_rate.record(listener_limit, at_ms)
        self._broker_rate.record(broker_limit, at_ms)
        return at_ms - now_ms

    def has_slot(self, listener: str) -> bool:
        """Whether a connection on `listener` may open now (max.connections)."""
        limits = self.limits
        if self.by_listener.get(listener, 0) >= limits.listener_max_connections.get(
            listener, UNLIMITED
        ):
            return False
        return self._protected(listener) or self.total < limits.max_connections

    def open(self, listener: str, ip: str) -> bool:
        """Counts a connection from `ip` on `listener` as open; False (nothing counted)
        if `ip` has max.connections.per.ip already: close it."""
        count = self.by_ip.get(ip, 0)
        if count >= self.limits.per_ip(ip):
            return False
        self.by_ip[ip] = count + 1
        self.by_listener[listener] = self.by_listener.get(listener, 0) + 1
        self.total += 1
        return True

    def close(self, listener: str, ip: str) -> None:
        """A connection `open` counted has ended."""
        left = self.by_ip.get(ip, 0) - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            self.by_ip.pop(ip, None)
        self.by_listener[listener] = max(self.by_listener.get(listener, 0) - 1, 0)
        self.total = max(self.total - 1, 0)

    def over_limit(self) -> bool:
        """Whether the broker holds more connections than max.connections (a protected
        listener's connection took it over): close another listener's oldest."""
        return self.total > self.limits.max_connections
