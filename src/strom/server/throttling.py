"""How a connection throttles a client over its quota, as Kafka's socket server does.

A quota port (`RequestThrottle`) is told what each request used, twice: its bytes in as
soon as it is read, then its answer's bytes out and the time the broker spent running its
handler once it is answered. Each time it answers how long the client must wait (0 for
none); the longer of the two counts. The connection then:

- puts that wait in the answer's `throttle_time_ms` and sends the answer at once, when
  the client honours it itself (KIP-219: Produce v6+, Fetch v8+ and so on,
  `client_throttles`); an older client's answer is held back for that long instead;
- reads nothing more from the connection until the wait is over (Kafka mutes the
  channel), so a client that ignores `throttle_time_ms`, or sends acks=0 produces that get
  no answer, is slowed down all the same.

The time a handler spent is measured by `TimedCall`, which runs the handler's coroutine
step by step and adds up the steps: the CPU the request cost the event loop, not the time
it waited for a disk or another node, as Kafka's request quota counts the time its
request handler threads spend.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.security.quota_rates import DEFAULT_SAMPLES, DEFAULT_WINDOW_MS
from strom.security.quota_sensors import ClientQuotaSensors, MutationBuckets, QuotaUse
from strom.server.clock import now_ms
from strom.server.handlers.fetch import replica_id_of
from strom.server.quota_hosts import QuotaHostNames

__all__ = [
    "ClientQuotaThrottle",
    "ControllerMutationQuota",
    "RequestThrottle",
    "RequestUsage",
    "TimedCall",
    "client_throttles",
    "with_throttle_time",
]

_CLIENT_THROTTLES_FROM: Mapping[int, int] = {
    ApiKey.PRODUCE: 6,
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1,
    ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1,
    ApiKey.DESCRIBE_ACLS: 1,
    ApiKey.CREATE_ACLS: 1,
    ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.DELETE_GROUPS: 1,
    ApiKey.ELECT_LEADERS: 0,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 0,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.OFFSET_DELETE: 0,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: 0,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_GROUP_HEARTBEAT: 0,
    ApiKey.SHARE_GROUP_DESCRIBE: 0,
    ApiKey.SHARE_FETCH: 0,
    ApiKey.SHARE_ACKNOWLEDGE: 0,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
}
"""The first version of each API whose client waits out `throttle_time_ms` itself (Kafka's
`shouldClientThrottle`); an API not named here never does."""


def client_throttles(api_key: int, api_version: int) -> bool:
    """Whether a client of this request version waits out a throttle itself (KIP-219)."""
    first = _CLIENT_THROTTLES_FROM.get(api_key)
    return first is not None and api_version >= first


def with_throttle_time(body: Any, throttle_ms: int) -> Any:
    """`body` (a response) with `throttle_time_ms` set, if its version has the field
    (unchanged for a wait of 0)."""
    if throttle_ms <= 0 or not any(f.name == "throttle_time" for f in dataclasses.fields(body)):
        return body
    return dataclasses.replace(body, throttle_time=timedelta(milliseconds=throttle_ms))


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """What one request used: the quotas' measures."""

    principal: str
    client_id: str
    api_key: ApiKey
    api_version: int
    request: Any
    """The request body (a follower's fetch is not a consumer's)."""
    request_bytes: int = 0
    response_bytes: int = 0
    handler_s: float = 0.0
    """The time the broker spent running the request's handler (TimedCall)."""


class RequestThrottle(Protocol):
    """The quotas a connection's requests are measured against."""

    def enforced(self) -> bool:
        """Whether any client quota is set now; if not, nothing is measured."""
        ...

    def throttle_ms(self, usage: RequestUsage) -> int:
        """Record `usage`; how long its client must wait now (0: not at all)."""
        ...


class TimedCall:
    """Awaits an awaitable (a handler's coroutine), adding up the time each of its steps
    ran (`spent_s`)."""

    __slots__ = ("_awaited", "spent_s")

    def __init__(self, awaited: Awaitable[Any]) -> None:
        self._awaited = awaited
        self.spent_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._awaited.__await__()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as stop:
                self.spent_s += time.perf_counter() - started
                return stop.value
            finally:
                thrown = None
            self.spent_s += time.perf_counter() - started
            try:
                sent = yield yielded
            except BaseException as exc:  # e.g. CancelledError: handed to the coroutine
                thrown, sent = exc, None


class ClientQuotaThrottle:
    """The client quotas of the metadata image, measured on the wall clock: the
    RequestThrottle of every client listener's connections (strom.security.quota_sensors
    decides). A broker's connections from other nodes are not throttled."""

    def __init__(
        self,
        image: Callable[[], MetadataImage],
        windows: tuple[int, int] = (DEFAULT_SAMPLES, DEFAULT_WINDOW_MS),
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        """`windows`: quota.window.num and quota.window.size.seconds (in ms)."""
        self._image = image
        self._clock_ms = clock_ms
        self._sensors = ClientQuotaSensors(*windows)
        self._hosts = QuotaHostNames()

    def enforced(self) -> bool:
        return bool(self._image().client_quotas)

    def connection_ms(self, address: str) -> int:
        """A new connection from `address`: how long it is over its IP's
        `connection_creation_rate` (0: serve it; else refuse it)."""
        quotas = self._image().client_quotas
        self._hosts.refresh(quotas)
        return self._sensors.connection_ms(address, quotas, self._clock_ms(), self._hosts.addresses)

    def throttle_ms(self, usage: RequestUsage) -> int:
        follower = (
            usage.api_key == ApiKey.FETCH and replica_id_of(usage.request, usage.api_version) >= 0
        )
        use = QuotaUse(
            user=_user_of(usage.principal),
            client_id=usage.client_id,
            api_key=usage.api_key,
            request_bytes=usage.request_bytes,
            response_bytes=usage.response_bytes,
            handler_s=usage.handler_s,
            follower=follower,
        )
        return self._sensors.throttle_ms(use, self._image().client_quotas, self._clock_ms())


_STRICT_FROM: Mapping[int, int] = {
    ApiKey.CREATE_TOPICS: 6,
    ApiKey.DELETE_TOPICS: 5,
    ApiKey.CREATE_PARTITIONS: 3,
}
"""The first version of each topic-changing API whose client knows
THROTTLING_QUOTA_EXCEEDED (KIP-599): its changes are refused when over the quota."""


class ControllerMutationQuota:
    """`controller_mutation_rate` at the active controller, on the wall clock
    (strom.security.quota_sensors.MutationBuckets decides): the port of the admin
    handlers that create and delete topics and partitions."""

    def __init__(
        self,
        image: Callable[[], MetadataImage],
        windows: tuple[int, int] = (DEFAULT_SAMPLES, DEFAULT_WINDOW_MS),
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        """`windows`: controller.quota.window.num and its size (in ms)."""
        self._image = image
        self._clock_ms = clock_ms
        self._buckets = MutationBuckets(*windows)

    def active(self) -> bool:
        return any(_MUTATION in v for v in self._image().client_quotas.values())

    def admit(self, request: Request, permits: Sequence[int | None]) -> list[bool]:
        """Whether each change (its partitions; None: not counted) may go ahead."""
        user, client_id = _user_of(request.principal), request.client_id or ""
        strict = request.api_version >= _STRICT_FROM.get(request.api_key, 0)
        quotas, now = self._image().client_quotas, self._clock_ms()
        return [
            count is None or self._buckets.admit(user, client_id, count, quotas, now, strict=strict)
            for count in permits
        ]

    def throttle_ms(self, request: Request) -> int:
        user, client_id = _user_of(request.principal), request.client_id or ""
        return self._buckets.throttle_ms(
            user, client_id, self._image().client_quotas, self._clock_ms()
        )


_MUTATION = "controller_mutation_rate"


def _user_of(principal: str) -> str:
    """The name a principal has for the client quotas: `alice` for User:alice."""
    kind, colon, name = principal.partition(":")
    return name if colon else kind
