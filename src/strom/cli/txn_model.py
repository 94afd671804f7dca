"""What `strom txn` makes of the transactional admin APIs' answers, without a broker.

The values below are built from kio's decoded responses (ListTransactions,
DescribeTransactions, DescribeProducers, FindCoordinator, Metadata, WriteTxnMarkers) and
turned into table rows here, so that all of it is tested without sockets. txn.py does the
talking.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from strom.cli.common import CommandError, usage_error
from strom.cli.wire import error_name, format_address, is_error

# Kafka's names of the states, as ListTransactions filters on them and both APIs answer
# them (strom.txn.state's wire names; not imported, so `strom` starts without it).
STATE_NAMES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)
_STATES_BY_LOWER = {name.lower(): name for name in STATE_NAMES}


# Answers after which the coordinator is looked up again, as Kafka's admin client does.
COORDINATOR_RETRIABLE = frozenset(
    {"COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR"}
)


class CoordinatorMoved(CommandError):
    """The coordinator answered that it is not (or not yet) the id's: ask again."""


def _coordinator_error(name: str, message: str) -> CommandError:
    if name in COORDINATOR_RETRIABLE:
        return CoordinatorMoved(message)
    return CommandError(message)


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    coordinator_id: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    coordinator: BrokerAddress
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    """-1 while no transaction is open."""
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    """-1: the partition has not seen a marker of this producer."""
    txn_start_offset: int
    """-1: no transaction of this producer is open on the partition."""


def parse_state(text: str) -> str:
    """A state name as Kafka spells it (`ongoing` -> `Ongoing`); a usage error if unknown."""
    name = _STATES_BY_LOWER.get(text.strip().lower().replace("-", "").replace("_", ""))
    if name is None:
        raise usage_error(
            f"--state: unknown transaction state {text!r}; one of {', '.join(STATE_NAMES)}"
        )
    return name


def parse_states(texts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(parse_state(text) for text in texts))


# --- answers ----------------------------------------------------------------------------


def _ms(value: Any) -> int:
    """Milliseconds of a kio duration (a timedelta) or int."""
    if isinstance(value, timedelta):
        return value.days * 86_400_000 + value.seconds * 1000 + value.microseconds // 1000
    return int(value)


def _epoch_ms(value: Any) -> int:
    """Epoch milliseconds of a kio instant (an aware datetime, or None for -1)."""
    if value is None:
        return -1
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def brokers_from_metadata(response: Any) -> tuple[BrokerAddress, ...]:
    brokers = (BrokerAddress(int(b.node_id), str(b.host), int(b.port)) for b in response.brokers)
    return tuple(sorted(brokers, key=lambda b: b.node_id))


def partition_leader(response: Any, topic: str, partition: int) -> int:
    """The leader's node id of one partition in a Metadata answer; CommandError if the
    topic or partition does not exist or has no leader."""
    for described in response.topics:
        if described.name != topic:
            continue
        if is_error(described.error_code):
            if error_name(described.error_code) == "UNKNOWN_TOPIC_OR_PARTITION":
                raise CommandError(f"topic {topic!r} does not exist")
            raise CommandError(f"topic {topic!r}: {error_name(described.error_code)}")
        for each in described.partitions:
            if int(each.partition_index) != partition:
                continue
            leader = int(each.leader_id)
            if leader < 0:
                raise CommandError(f"{topic}-{partition} has no leader now")
            return leader
        count = len(described.partitions)
        raise CommandError(
            f"topic {topic!r} has no partition {partition} (it has {count}: 0-{count - 1})"
        )
    raise CommandError(f"topic {topic!r} does not exist")


def listings_from(response: Any, coordinator_id: int) -> list[TxnListing]:
    """One broker's ListTransactions answer; CommandError on its error code."""
    if is_error(response.error_code):
        raise CommandError(f"ListTransactions: {error_name(response.error_code)}")
    return [
        TxnListing(
            str(t.transactional_id), coordinator_id, int(t.producer_id), str(t.transaction_state)
        )
        for t in response.transaction_states
    ]


def description_from(response: Any, coordinator: BrokerAddress, txn_id: str) -> TxnDescription:
    """The id's DescribeTransactions answer; CommandError on its error code."""
    found = next(
        (t for t in response.transaction_states if str(t.transactional_id) == txn_id), None
    )
    if found is None:
        raise CommandError(f"DescribeTransactions: no answer for {txn_id!r}")
    if is_error(found.error_code):
        name = error_name(found.error_code)
        if name == "TRANSACTIONAL_ID_NOT_FOUND":
            raise CommandError(f"transactional id {txn_id!r} does not exist")
        raise _coordinator_error(name, f"transactional id {txn_id!r}: {name}")
    partitions = sorted((str(t.topic), int(p)) for t in found.topics for p in t.partitions)
    return TxnDescription(
        transactional_id=txn_id,
        coordinator=coordinator,
        state=str(found.transaction_state),
        producer_id=int(found.producer_id),
        producer_epoch=int(found.producer_epoch),
        timeout_ms=_ms(found.transaction_timeout),
        start_ms=_epoch_ms(found.transaction_start_time),
        partitions=tuple(partitions),
    )


def coordinator_from(response: Any, txn_id: str) -> BrokerAddress:
    """The coordinator a FindCoordinator answer names (v0-v3 at the top, v4+ per key)."""
    answer = next((c for c in getattr(response, "coordinators", ())), response)
    if is_error(answer.error_code):
        name = error_name(answer.error_code)
        why = getattr(answer, "error_message", None)
        raise _coordinator_error(
            name,
            f"cannot find the coordinator of transactional id {txn_id!r}: {name}"
            + (f" ({why})" if why else ""),
        )
    return BrokerAddress(int(answer.node_id), str(answer.host), int(answer.port))


def producers_from(response: Any, topic: str, partition: int, where: str) -> list[ProducerInfo]:
    """One partition's producers in a DescribeProducers answer; CommandError on its error."""
    for described in response.topics:
        for each in described.partitions:
            if described.name != topic or int(each.partition_index) != partition:
                continue
            if is_error(each.error_code):
                why = f" ({each.error_message})" if each.error_message else ""
                raise CommandError(
                    f"cannot describe the producers of {topic}-{partition} at {where}: "
                    f"{error_name(each.error_code)}{why}"
                )
            return [
                ProducerInfo(
                    producer_id=int(p.producer_id),
                    producer_epoch=int(p.producer_epoch),
                    last_sequence=int(p.last_sequence),
                    last_timestamp_ms=int(p.last_timestamp),
                    coordinator_epoch=int(p.coordinator_epoch),
                    txn_start_offset=int(p.current_txn_start_offset),
                )
                for p in each.active_producers
            ]
    raise CommandError(f"DescribeProducers: no answer for {topic}-{partition}")


def marker_errors(response: Any) -> list[str]:
    """`topic-partition: ERROR` for each partition a WriteTxnMarkers answer refused."""
    return [
        f"{topic.name}-{int(p.partition_index)}: {error_name(p.error_code)}"
        for marker in response.markers
        for topic in marker.topics
        for p in topic.partitions
        if is_error(p.error_code)
    ]


# --- the abort ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """What WriteTxnMarkers needs to abort one producer's open transaction on a partition."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int

    def request(self) -> dict[str, Any]:
        """WriteTxnMarkers' fields: one ABORT marker for the one partition."""
        return {
            "markers": [
                {
                    "producer_id": self.producer_id,
                    "producer_epoch": self.producer_epoch,
                    "transaction_result": False,
                    "topics": [{"name": self.topic, "partition_indexes": [self.partition]}],
                    "coordinator_epoch": self.coordinator_epoch,
                }
            ]
        }


def abort_spec(
    producers: Sequence[ProducerInfo], topic: str, partition: int, start_offset: int
) -> AbortSpec:
    """The producer whose open transaction starts at `start_offset`, as Kafka's tool finds
    it. A coordinator epoch of -1 (no marker seen yet) is sent as 0, as Kafka's tool does:
    no coordinator's epoch is lower."""
    found = next((p for p in producers if p.txn_start_offset == start_offset), None)
    if found is None:
        open_at = sorted(p.txn_start_offset for p in producers if p.txn_start_offset >= 0)
        hint = (
            f"open transactions start at {', '.join(map(str, open_at))}"
            if open_at
            else "no transaction is open there"
        )
        raise CommandError(
            f"no open transaction starts at offset {start_offset} on {topic}-{partition} ({hint})"
        )
    return AbortSpec(
        topic=topic,
        partition=partition,
        producer_id=found.producer_id,
        producer_epoch=found.producer_epoch,
        coordinator_epoch=max(0, found.coordinator_epoch),
        start_offset=start_offset,
    )


# --- tables -------------------------------------------------------------------------------

LIST_HEADERS = ("TRANSACTIONAL ID", "COORDINATOR", "PRODUCER ID", "STATE")
PRODUCER_HEADERS = (
    "PRODUCER ID",
    "EPOCH",
    "LAST SEQUENCE",
    "LAST TIMESTAMP",
    "COORDINATOR EPOCH",
    "TXN START OFFSET",
)
PARTITION_HEADERS = ("TOPIC", "PARTITION")


def format_time_ms(epoch_ms_value: int) -> str:
    """1700000000000 -> "2023-11-14T22:13:20.000Z"; -1 (none) -> "-"."""
    if epoch_ms_value < 0:
        return "-"
    moment = datetime.fromtimestamp(epoch_ms_value / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms_value % 1000:03d}Z"


def format_duration_ms(duration_ms: int) -> str:
    """312 -> "312 ms", 4200 -> "4.2 s", 125000 -> "2 min 5 s", 7_500_000 -> "2 h 5 min"."""
    if duration_ms < 1000:
        return f"{duration_ms} ms"
    if duration_ms < 60_000:
        return f"{duration_ms / 1000:.1f} s"
    if duration_ms < 3_600_000:
        return f"{duration_ms // 60_000} min {duration_ms // 1000 % 60} s"
    return f"{duration_ms // 3_600_000} h {duration_ms // 60_000 % 60} min"


def _or_dash(value: int) -> str:
    return "-" if value < 0 else str(value)


def list_rows(listings: Iterable[TxnListing]) -> list[tuple[str, str, str, str]]:
    ordered = sorted(listings, key=lambda t: (t.transactional_id, t.coordinator_id))
    return [
        (t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state) for t in ordered
    ]


def producer_rows(producers: Iterable[ProducerInfo]) -> list[tuple[str, ...]]:
    return [
        (
            str(p.producer_id),
            str(p.producer_epoch),
            _or_dash(p.last_sequence),
            format_time_ms(p.last_timestamp_ms),
            _or_dash(p.coordinator_epoch),
            _or_dash(p.txn_start_offset),
        )
        for p in sorted(producers, key=lambda p: p.producer_id)
    ]


def description_lines(description: TxnDescription, now_ms: int) -> list[str]:
    d = description
    started = format_time_ms(d.start_ms)
    if d.start_ms >= 0:
        started += f" ({format_duration_ms(max(0, now_ms - d.start_ms))} ago)"
    return [
        f"Transactional id:  {d.transactional_id}",
        f"Coordinator:       node {d.coordinator.node_id} ({d.coordinator.address})",
        f"State:             {d.state}",
        f"Producer id:       {d.producer_id}",
        f"Producer epoch:    {d.producer_epoch}",
        f"Timeout:           {d.timeout_ms} ms",
        f"Started:           {started}",
        f"Partitions:        {len(d.partitions)}",
    ]


def partition_rows(partitions: Iterable[tuple[str, int]]) -> list[tuple[str, str]]:
    return [(topic, str(index)) for topic, index in partitions]
