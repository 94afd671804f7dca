"""Which client quotas a request counts against, and how long its client waits: Kafka's
produce, fetch and request quota managers over the client quotas of the metadata image.

- `producer_byte_rate`: the bytes of each Produce request.
- `consumer_byte_rate`: the bytes of each Fetch answer to a consumer (a follower's fetch
  is replication, never throttled here).
- `request_percentage`: the time the broker spent running each request's handler, as a
  percentage of one thread (Kafka counts its request handler threads' time); every
  request but the nodes' own (`EXEMPT`) counts. Its wait is at most one window.

A request's wait is the longest of those it is over. Each quota is measured by a sampled
rate (quota_rates.py) per client the way Kafka tags its sensors: by the level the quota
was found at (quota_resolution.py), with a default entity's part replaced by the client's
own name, so `<default>` gives every user a quota of its own, while a quota set on user
alice is shared by all of alice's client ids.

- `connection_creation_rate`: the new connections of each address (an IP's own quota,
  else the IP default), as Kafka's connection quotas count them (KIP-612); a connection
  over it is refused (`connection_ms`). An entity named by a host name counts for the
  addresses the name resolved to (`hosts`; the shell resolves them when the quota is
  set, as Kafka resolves an IP entity's name when its config changes).

- `controller_mutation_rate` (`MutationBuckets`, at the active controller): the
  partitions each CreateTopics, CreatePartitions and DeleteTopics creates or deletes,
  in KIP-599's token bucket. Strict (the request versions whose clients know
  THROTTLING_QUOTA_EXCEEDED): a topic is refused while the bucket is below zero, and
  may take it below zero; permissive (older versions): every topic is let through and
  counted. Either way the answer carries the time until the bucket is back at zero.

Sensors nobody used for `samples` windows measure a rate of 0 and are dropped, so a
client inventing client ids cannot make the broker hold more than the clients of the
last few seconds. Pure: the time and the quotas are passed in.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from dataclasses import dataclass

from strom.metadata.quota_entities import CLIENT_ID, IP, USER, QuotaEntity
from strom.security.quota_rates import (
    DEFAULT_SAMPLES,
    DEFAULT_WINDOW_MS,
    SampledRate,
    TokenBucket,
)
from strom.security.quota_resolution import client_quota, ip_quota

__all__ = ["EXEMPT", "ClientQuotaSensors", "MutationBuckets", "QuotaUse"]

# Kafka API keys (strom.protocol.apis.ApiKey) the quotas treat apart.
_PRODUCE, _FETCH = 0, 1
EXEMPT = frozenset({27, 56, 62, 63, 67})
_NO_HOSTS: Mapping[str, frozenset[str]] = {}
"""Requests only nodes send (WriteTxnMarkers, AlterPartition, BrokerRegistration,
BrokerHeartbeat, AllocateProducerIds): never throttled, as Kafka exempts cluster
actions."""

Quotas = Mapping[QuotaEntity, Mapping[str, float]]
_PERCENT = 100.0


@dataclass(frozen=True, slots=True)
class QuotaUse:
    """What one request used, as the quotas measure it."""

    user: str
    """The principal's name: `alice` for User:alice, `ANONYMOUS` for a client without one."""
    client_id: str
    api_key: int
    request_bytes: int
    response_bytes: int
    handler_s: float
    follower: bool = False
    """A replica's Fetch (replication, not a consumer)."""


@dataclass(slots=True)
class _Sensor:
    rate: SampledRate
    used_ms: int


class ClientQuotaSensors:
    """The sensors of every client that used a quota lately."""

    def __init__(self, samples: int = DEFAULT_SAMPLES, window_ms: int = DEFAULT_WINDOW_MS):
        self._samples = samples
        self._window_ms = window_ms
        self._sensors: dict[tuple[str, str | None, str | None], _Sensor] = {}
        self._swept_ms = 0

    def __len__(self) -> int:
        return len(self._sensors)

    def throttle_ms(self, use: QuotaUse, quotas: Quotas, now_ms: int) -> int:
        """Record `use` at `now_ms`; how long its client waits (0: not at all)."""
        self._sweep(now_ms)
        if not quotas or use.api_key in EXEMPT:
            return 0
        wait = 0
        if use.api_key == _PRODUCE:
            wait = self._measure("producer_byte_rate", use, use.request_bytes, quotas, now_ms)
        elif use.api_key == _FETCH and not use.follower:
            wait = self._measure("consumer_byte_rate", use, use.response_bytes, quotas, now_ms)
        percent = use.handler_s * _PERCENT
        cap = self._window_ms
        return max(wait, self._measure("request_percentage", use, percent, quotas, now_ms, cap))

    def _measure(
        self,
        key: str,
        use: QuotaUse,
        value: float,
        quotas: Quotas,
        now_ms: int,
        max_throttle_ms: int | None = None,
    ) -> int:
        found = client_quota(quotas, key, user=use.user, client_id=use.client_id)
        if found is None:
            return 0
        rate = self._rate((key, *_tags(found.entity, use)), now_ms)
        return rate.record_and_throttle(value, now_ms, found.value, max_throttle_ms=max_throttle_ms)

    def _rate(self, tags: tuple[str, str | None, str | None], now_ms: int) -> SampledRate:
        """The sensor of `tags` (key, user, client id or address), used at `now_ms`."""
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = self._sensors[tags] = _Sensor(
                SampledRate(self._samples, self._window_ms), now_ms
            )
        sensor.used_ms = now_ms
        return sensor.rate

    def connection_ms(
        self,
        address: str,
        quotas: Quotas,
        now_ms: int,
        hosts: Mapping[str, frozenset[str]] = _NO_HOSTS,
    ) -> int:
        """Record a new connection from `address` at `now_ms`; how long it is over its
        `connection_creation_rate` (0: it may be served; else it is refused). `hosts`:
        the addresses of the IP entities named by a host name."""
        self._sweep(now_ms)
        limit = _ip_limit(quotas, address, hosts) if quotas else None
        if limit is None:
            return 0
        rate = self._rate(("connection_creation_rate", address, None), now_ms)
        return rate.record_and_throttle(1, now_ms, limit)

    def _sweep(self, now_ms: int) -> None:
        idle_ms = self._samples * self._window_ms
        if now_ms - self._swept_ms < idle_ms:
            return
        self._swept_ms = now_ms
        for tags in [t for t, s in self._sensors.items() if now_ms - s.used_ms >= idle_ms]:
            del self._sensors[tags]


def _tags(entity: QuotaEntity, use: QuotaUse) -> tuple[str | None, str | None]:
    """(user, client id) of the sensor a client's quota found at `entity` is measured by:
    the parts the entity has, a default part named as the client's own."""
    user = use.user if entity.has(USER) else None
    client = use.client_id if entity.has(CLIENT_ID) else None
    return user, client


def _ip_limit(quotas: Quotas, address: str, hosts: Mapping[str, frozenset[str]]) -> float | None:
    """`address`'s `connection_creation_rate`: its own entity's, also when the entity
    writes the address another way (`::1` as `0:0:0:0:0:0:0:1`) or names a host that
    resolved to it, else the IP default's."""
    found = ip_quota(quotas, address)
    if found is not None and found.entity != QuotaEntity.ip(None):
        return found.value
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return None if found is None else found.value
    for entity, values in quotas.items():
        name = entity.name(IP) if entity.has(IP) else None
        limit = values.get("connection_creation_rate")
        if name is None or limit is None:
            continue
        if _names(name, wanted, hosts):
            return limit
    return None if found is None else found.value


def _names(
    name: str,
    wanted: ipaddress.IPv4Address | ipaddress.IPv6Address,
    hosts: Mapping[str, frozenset[str]],
) -> bool:
    """Whether an IP entity's `name` (an address, or a host name) stands for `wanted`."""
    try:
        return ipaddress.ip_address(name) == wanted
    except ValueError:
        pass
    for resolved in hosts.get(name, ()):
        try:
            if ipaddress.ip_address(resolved) == wanted:
                return True
        except ValueError:
            continue
    return False


_MUTATION = "controller_mutation_rate"


class MutationBuckets:
    """The `controller_mutation_rate` bucket of every client that changed topics lately,
    tagged as the sensors are; a bucket idle for `samples` windows is full again and is
    dropped."""

    def __init__(self, samples: int = DEFAULT_SAMPLES, window_ms: int = DEFAULT_WINDOW_MS):
        self._samples = samples
        self._window_ms = window_ms
        self._buckets: dict[tuple[str | None, str | None], tuple[TokenBucket, list[int]]] = {}
        self._swept_ms = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def admit(
        self, user: str, client_id: str, permits: int, quotas: Quotas, now_ms: int, *, strict: bool
    ) -> bool:
        """Whether a topic change of `permits` partitions may go ahead at `now_ms`; it is
        counted when it may."""
        self._sweep(now_ms)
        found = client_quota(quotas, _MUTATION, user=user, client_id=client_id)
        if found is None:
            return True
        bucket = self._bucket(found.entity, user, client_id, now_ms)
        if strict and bucket.available(now_ms, found.value) < 0:
            return False
        bucket.take(permits, now_ms, found.value)
        return True

    def throttle_ms(self, user: str, client_id: str, quotas: Quotas, now_ms: int) -> int:
        """How long until the client's bucket is back at zero (0: it is not below)."""
        found = client_quota(quotas, _MUTATION, user=user, client_id=client_id)
        if found is None:
            return 0
        return self._bucket(found.entity, user, client_id, now_ms).throttle_ms(now_ms, found.value)

    def _bucket(self, entity: QuotaEntity, user: str, client_id: str, now_ms: int) -> TokenBucket:
        tags = _tags(entity, QuotaUse(user, client_id, 0, 0, 0, 0.0))
        held = self._buckets.get(tags)
        if held is None:  # a new bucket is full (its first refill caps it at the burst)
            bucket = TokenBucket(self._samples, self._window_ms, math.inf, now_ms)
            held = self._buckets[tags] = (bucket, [now_ms])
        held[1][0] = now_ms
        return held[0]

    def _sweep(self, now_ms: int) -> None:
        idle_ms = self._samples * self._window_ms
        if now_ms - self._swept_ms < idle_ms:
            return
        self._swept_ms = now_ms
        for tags in [t for t, (_, used) in self._buckets.items() if now_ms - used[0] >= idle_ms]:
            del self._buckets[tags]
