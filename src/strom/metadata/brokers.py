"""Broker registration, heartbeats and producer id blocks: pure controller decisions.

A broker's life in the image (KRaft's):

    (not registered) --register_broker--> registered, fenced (epoch = the entry's offset)
    fenced --broker_heartbeat, caught up with the metadata log--> unfenced
    unfenced --fence_brokers (session expired), want_fence or want_shutdown--> fenced
    any --register_broker with a new incarnation, old session over--> fenced, new epoch
    any --unregister_broker--> (not registered)

Each decision returns (records, result); the shell commits the records as one entry and
answers the broker from the result. Liveness itself (who heartbeated when) is the shell's:
it passes `session_alive` to registration and calls `fence_brokers` for expired sessions.
Leadership and ISR rules are in elections.py; its public decisions are re-exported here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.metadata.elections import (
    UncleanPolicy,
    fence_brokers,
    partitions_led_by,
    preferred_leader_elections,
    unfence_broker,
)
from strom.metadata.image import BrokerImage, MetadataImage
from strom.metadata.records import (
    BrokerEndpoint,
    MetadataRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)

__all__ = [
    "BrokerResult",
    "HeartbeatResult",
    "ProducerIdsResult",
    "RegistrationResult",
    "UncleanPolicy",
    "allocate_producer_ids",
    "broker_heartbeat",
    "fence_brokers",
    "partitions_led_by",
    "preferred_leader_elections",
    "register_broker",
    "unfence_broker",
    "unregister_broker",
]

PRODUCER_ID_LIMIT = 2**63 - 1
DEFAULT_PRODUCER_ID_BLOCK = 1000


def _never(_topic: str) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class RegistrationResult:
    error_code: ErrorCode
    message: str | None
    broker_epoch: int
    """-1 when refused. For a new registration: the offset its entry gets if it is the next
    entry after `image` (the controller's speculative image); the image replayed with the
    entry has the authoritative epoch."""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error_code: ErrorCode
    is_caught_up: bool
    is_fenced: bool
    should_shutdown: bool
    message: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerResult:
    error_code: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdsResult:
    error_code: ErrorCode
    first_id: int
    count: int
    message: str | None = None


def register_broker(
    image: MetadataImage,
    broker_id: int,
    incarnation_id: uuid.UUID,
    host: str,
    port: int,
    rack: str | None,
    *,
    session_alive: bool,
    endpoints: tuple[BrokerEndpoint, ...] = (),
    unclean: UncleanPolicy = _never,
) -> tuple[list[MetadataRecord], RegistrationResult]:
    """Register (or re-register) a broker process, fenced until it has caught up.

    The same incarnation again is a retry: no records, the existing epoch. A new
    incarnation is refused while the old one is unfenced and its session alive; otherwise
    the old registration is fenced (moving its leaderships) and replaced.
    """
    problem = _bad_address(broker_id, host, port) or _bad_endpoints(broker_id, endpoints)
    if problem is not None:
        return [], RegistrationResult(ErrorCode.invalid_request, problem, -1)
    existing = image.brokers.get(broker_id)
    if existing is not None and existing.incarnation_id == incarnation_id:
        return [], RegistrationResult(ErrorCode.none, None, existing.epoch)
    records: list[MetadataRecord] = []
    if existing is not None and not existing.fenced:
        if session_alive:
            return [], RegistrationResult(
                ErrorCode.duplicate_broker_registration,
                f"broker {broker_id} is already registered by a live process; it can "
                "register again once the old session times out (broker.session.timeout.ms)",
                -1,
            )
        records.extend(fence_brokers(image, [broker_id], unclean=unclean))
    records.append(
        RegisterBrokerRecord(
            broker_id, incarnation_id, host, port, rack or None, fenced=True, endpoints=endpoints
        )
    )
    return records, RegistrationResult(ErrorCode.none, None, image.offset + 1)


def _bad_address(broker_id: int, host: str, port: int) -> str | None:
    if broker_id < 0:
        return f"broker id {broker_id} is negative"
    if not host:
        return f"broker {broker_id} registered without a host"
    if not 0 <= port <= 65535:
        return f"broker {broker_id} registered port {port}, which is not 0..65535"
    return None


def _bad_endpoints(broker_id: int, endpoints: tuple[BrokerEndpoint, ...]) -> str | None:
    names: set[str] = set()
    for endpoint in endpoints:
        if not endpoint.name:
            return f"broker {broker_id} registered a listener without a name"
        if endpoint.name in names:
            return f"broker {broker_id} registered listener {endpoint.name!r} twice"
        names.add(endpoint.name)
        problem = _bad_address(broker_id, endpoint.host, endpoint.port)
        if problem is not None:
            return f"{problem} (listener {endpoint.name!r})"
    return None


def _check_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerImage:
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise _EpochError(
            ErrorCode.broker_id_not_registered,
            f"broker {broker_id} is not registered; it must register first",
        )
    if broker.epoch != broker_epoch:
        raise _EpochError(
            ErrorCode.stale_broker_epoch,
            f"broker {broker_id} sent epoch {broker_epoch}, but its current registration "
            f"has epoch {broker.epoch}; it must register again",
        )
    return broker


class _EpochError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def broker_heartbeat(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    current_metadata_offset: int,
    want_fence: bool,
    want_shutdown: bool,
    *,
    unclean: UncleanPolicy,
    rejoin_isr: bool = False,
) -> tuple[list[MetadataRecord], HeartbeatResult]:
    """A broker's heartbeat. It is caught up once it has applied the metadata log up to
    its own registration (current_metadata_offset >= its epoch); a fenced broker that is
    caught up and wants neither fencing nor shutdown is unfenced (see
    elections.unfence_broker for `rejoin_isr`). `want_shutdown` (controlled shutdown)
    moves its leaderships to other live ISR members and fences it; as fencing leaves it
    leading nothing, should_shutdown is then True."""
    try:
        broker = _check_epoch(image, broker_id, broker_epoch)
    except _EpochError as refused:
        return [], HeartbeatResult(refused.code, False, True, False, refused.message)
    caught_up = current_metadata_offset >= broker.epoch
    if want_shutdown or want_fence:
        records = fence_brokers(image, [broker_id], unclean=unclean)
        return records, HeartbeatResult(ErrorCode.none, caught_up, True, want_shutdown)
    if broker.fenced and caught_up:
        records = unfence_broker(image, broker_id, unclean=unclean, rejoin_isr=rejoin_isr)
        return records, HeartbeatResult(ErrorCode.none, True, False, False)
    return [], HeartbeatResult(ErrorCode.none, caught_up, broker.fenced, False)


def unregister_broker(
    image: MetadataImage, broker_id: int, *, unclean: UncleanPolicy = _never
) -> tuple[list[MetadataRecord], BrokerResult]:
    """Remove a broker for good (Kafka's UnregisterBroker): fenced first if it is not, so its
    leaderships move; its ids stay in replica lists until those are reassigned."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        return [], BrokerResult(
            ErrorCode.broker_id_not_registered, f"broker {broker_id} is not registered"
        )
    records = fence_brokers(image, [broker_id], unclean=unclean)
    records.append(UnregisterBrokerRecord(broker_id, broker.epoch))
    return records, BrokerResult(ErrorCode.none)


def allocate_producer_ids(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    block_size: int = DEFAULT_PRODUCER_ID_BLOCK,
) -> tuple[list[MetadataRecord], ProducerIdsResult]:
    """Hand the next `block_size` producer ids to a registered broker (current epoch)."""
    try:
        _check_epoch(image, broker_id, broker_epoch)
    except _EpochError as refused:
        return [], ProducerIdsResult(refused.code, -1, 0, refused.message)
    if block_size < 1:
        return [], ProducerIdsResult(
            ErrorCode.invalid_request, -1, 0, f"block size {block_size} is not positive"
        )
    first = image.next_producer_id
    if first > PRODUCER_ID_LIMIT - block_size + 1:
        return [], ProducerIdsResult(
            ErrorCode.unknown_server_error, -1, 0, "the cluster has used up its producer ids"
        )
    records: list[MetadataRecord] = [ProducerIdsRecord(broker_id, broker_epoch, first + block_size)]
    return records, ProducerIdsResult(ErrorCode.none, first, block_size)
