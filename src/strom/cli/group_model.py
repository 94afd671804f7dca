"""What `strom group` works out without a broker: option parsing, table rows, reset plans.

Everything here is a function of plain values (and confluent-kafka's plain result
classes), so the unit tests need no sockets; group.py does the talking.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from enum import Enum
from typing import TYPE_CHECKING

from strom.cli.common import CommandError, usage_error

if TYPE_CHECKING:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        ConsumerGroupDescription,
        ConsumerGroupListing,
        MemberDescription,
    )

Partition = tuple[str, int]  # (topic, partition)

NONE = "-"

# Broker errors meaning "this group has members": DeleteGroups' NON_EMPTY_GROUP, and what
# an OffsetCommit without a generation gets while members are in the group (strom answers
# ILLEGAL_GENERATION; Kafka UNKNOWN_MEMBER_ID, or REBALANCE_IN_PROGRESS mid-rebalance).
ACTIVE_MEMBER_ERRORS = frozenset(
    {"NON_EMPTY_GROUP", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS"}
)

# confluent-kafka's ConsumerGroupState names -> the names Kafka's tools print.
_STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}


def state_name(state: object) -> str:
    """ConsumerGroupState.PREPARING_REBALANCING -> "PreparingRebalance"."""
    name = str(getattr(state, "name", state))
    return _STATE_NAMES.get(name, name.title())


def group_missing_message(group: str) -> str:
    return f"group {group!r} does not exist"


def active_members_message(group: str) -> str:
    return f"group {group!r} has active members; stop them first"


def group_error_message(group: str, error_name: str) -> str | None:
    """The message for a group-level broker error that has a plainer way to say it."""
    if error_name in ACTIVE_MEMBER_ERRORS:
        return active_members_message(group)
    if error_name == "GROUP_ID_NOT_FOUND":
        return group_missing_message(group)
    return None


# --- --topic T[:P,...] ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """One `--topic`: a topic and some of its partitions, or all of them (None)."""

    topic: str
    partitions: frozenset[int] | None = None


def parse_topic_selection(text: str) -> TopicSelection:
    """`events`, `events:0` or `events:0,2,5` (Kafka topic names never contain `:`)."""
    topic, sep, rest = text.strip().rpartition(":")
    if not sep:
        topic, rest = rest, ""
    topic = topic.strip()
    if not topic:
        raise usage_error(f"--topic expects TOPIC or TOPIC:PARTITION,..., got {text!r}")
    if not sep:
        return TopicSelection(topic)
    partitions: set[int] = set()
    for part in rest.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):
            raise usage_error(
                f"--topic {text!r}: partitions are numbers separated by commas, got {part!r}"
            )
        partitions.add(int(part))
    return TopicSelection(topic, frozenset(partitions))


def merge_selections(selections: Iterable[TopicSelection]) -> list[TopicSelection]:
    """One selection per topic, in the order first named; "all partitions" wins."""
    merged: dict[str, frozenset[int] | None] = {}
    for each in selections:
        if each.topic not in merged:
            merged[each.topic] = each.partitions
            continue
        known = merged[each.topic]
        if known is None or each.partitions is None:
            merged[each.topic] = None
        else:
            merged[each.topic] = known | each.partitions
    return [TopicSelection(topic, partitions) for topic, partitions in merged.items()]


def selected_partitions(selection: TopicSelection, partition_count: int) -> list[Partition]:
    """The selection's partitions, checked against how many the topic has."""
    if selection.partitions is None:
        return [(selection.topic, p) for p in range(partition_count)]
    missing = sorted(p for p in selection.partitions if p >= partition_count)
    if missing:
        raise usage_error(
            f"topic {selection.topic!r} has no partition {missing[0]} (it has {partition_count})"
        )
    return [(selection.topic, p) for p in sorted(selection.partitions)]


# --- --to-datetime --------------------------------------------------------------------

DATETIME_EXAMPLES = "2024-05-01T12:00:00Z, 2024-05-01T14:00+02:00 or 2024-05-01"


def parse_datetime_ms(text: str, local: tzinfo | None = None) -> int:
    """ISO 8601 -> milliseconds since the epoch; without a zone, `local` (the machine's)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise usage_error(
            f"--to-datetime expects an ISO 8601 date and time such as {DATETIME_EXAMPLES}; "
            f"got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=local) if local is not None else moment.astimezone()
    return max(0, round(moment.timestamp() * 1000))


# --- describe ---------------------------------------------------------------------------


def format_assignment(partitions: Iterable[Partition]) -> str:
    """[("a", 1), ("a", 0), ("b", 2)] -> "a:0,1 b:2" (the --topic syntax)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return (
        " ".join(
            f"{topic}:{','.join(str(p) for p in sorted(ps))}"
            for topic, ps in sorted(by_topic.items())
        )
        or NONE
    )


def member_partitions(member: MemberDescription) -> list[Partition]:
    assignment = member.assignment
    tps = assignment.topic_partitions if assignment is not None else []
    return [(tp.topic, tp.partition) for tp in tps]


def member_rows(members: Sequence[MemberDescription]) -> list[tuple[str, str, str, str, str]]:
    """(member id, client id, host, group.instance.id, assignment), by member id."""
    return [
        (
            m.member_id,
            m.client_id or NONE,
            m.host or NONE,
            m.group_instance_id or NONE,
            format_assignment(member_partitions(m)),
        )
        for m in sorted(members, key=lambda m: m.member_id)
    ]


def partition_owners(members: Sequence[MemberDescription]) -> dict[Partition, str]:
    return {tp: m.member_id for m in members for tp in member_partitions(m)}


def lag(committed: int | None, log_end: int | None) -> int | None:
    """Records the group has still to read: log end minus committed, unknown without both.

    Not clamped at 0, as Kafka's tool does not: a negative lag says the committed offset
    is past the log's end (the topic was recreated, or records were lost).
    """
    if committed is None or log_end is None:
        return None
    return log_end - committed


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    owner: str | None

    @property
    def lag(self) -> int | None:
        return lag(self.committed, self.log_end)

    def row(self) -> tuple[str, str, str, str, str, str]:
        return (
            self.topic,
            str(self.partition),
            _text(self.committed),
            _text(self.log_end),
            _text(self.lag),
            self.owner or NONE,
        )


def _text(value: int | None) -> str:
    return NONE if value is None else str(value)


def group_progress(
    committed: Mapping[Partition, int],
    log_ends: Mapping[Partition, int],
    owners: Mapping[Partition, str],
) -> list[PartitionProgress]:
    """Every partition the group has a committed offset for or a member reads, in order."""
    return [
        PartitionProgress(*key, committed.get(key), log_ends.get(key), owners.get(key))
        for key in sorted(set(committed) | set(owners))
    ]


def total_lag(progress: Iterable[PartitionProgress]) -> int | None:
    """The sum of the known lags; None if no partition's lag is known."""
    known = [each.lag for each in progress if each.lag is not None]
    return sum(known) if known else None


# --- reset-offsets ------------------------------------------------------------------------


class ResetMode(Enum):
    EARLIEST = "--to-earliest"
    LATEST = "--to-latest"
    DATETIME = "--to-datetime"
    OFFSET = "--to-offset"
    SHIFT = "--shift-by"


@dataclass(frozen=True, slots=True)
class ResetTarget:
    mode: ResetMode
    value: int = 0  # the offset, the shift, or the timestamp in ms


def reset_target(
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    to_offset: int | None,
    shift_by: int | None,
) -> ResetTarget:
    """Exactly one of the five --to-*/--shift-by options."""
    chosen: list[ResetTarget] = []
    if to_earliest:
        chosen.append(ResetTarget(ResetMode.EARLIEST))
    if to_latest:
        chosen.append(ResetTarget(ResetMode.LATEST))
    if to_datetime is not None:
        chosen.append(ResetTarget(ResetMode.DATETIME, parse_datetime_ms(to_datetime)))
    if to_offset is not None:
        chosen.append(ResetTarget(ResetMode.OFFSET, to_offset))
    if shift_by is not None:
        chosen.append(ResetTarget(ResetMode.SHIFT, shift_by))
    *others, last = (mode.value for mode in ResetMode)
    if not chosen:
        raise usage_error(f"choose where to reset to: {', '.join(others)} or {last}")
    if len(chosen) > 1:
        raise usage_error(f"choose one of {', '.join(others)} and {last}")
    return chosen[0]


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """What the broker said about one partition: its first and next offsets, and the
    first offset at or after --to-datetime's time (None: no such record)."""

    earliest: int
    log_end: int
    at_time: int | None = None


@dataclass(frozen=True, slots=True)
class PlannedOffset:
    topic: str
    partition: int
    current: int | None
    new: int

    def row(self) -> tuple[str, str, str, str]:
        return (self.topic, str(self.partition), _text(self.current), str(self.new))


def plan_reset(
    target: ResetTarget,
    partitions: Sequence[Partition],
    committed: Mapping[Partition, int],
    bounds: Mapping[Partition, PartitionBounds],
) -> tuple[list[PlannedOffset], list[str]]:
    """The new offset of each partition, and warnings about offsets moved into range.

    As Kafka's tool does, an offset outside [earliest, log end] is moved to the nearer
    end, and a time after the newest record means the log end.
    """
    shiftless = [p for p in partitions if target.mode is ResetMode.SHIFT and p not in committed]
    if shiftless:
        raise CommandError(
            f"--shift-by needs a committed offset to shift, and there is none for "
            f"{format_assignment(shiftless)}; choose those partitions' offsets with another "
            "--to-* option"
        )
    plan: list[PlannedOffset] = []
    warnings: list[str] = []
    for topic, partition in partitions:
        b = bounds[(topic, partition)]
        current = committed.get((topic, partition))
        match target.mode:
            case ResetMode.EARLIEST:
                wanted = b.earliest
            case ResetMode.LATEST:
                wanted = b.log_end
            case ResetMode.DATETIME:
                wanted = b.log_end if b.at_time is None else b.at_time
            case ResetMode.OFFSET:
                wanted = target.value
            case ResetMode.SHIFT:
                assert current is not None
                wanted = current + target.value
        new = min(max(wanted, b.earliest), b.log_end)
        if new != wanted:
            end = "log end" if wanted > b.log_end else "log start"
            warnings.append(
                f"offset {wanted} is outside {topic}:{partition} "
                f"({b.earliest} to {b.log_end}); using its {end}, {new}"
            )
        plan.append(PlannedOffset(topic, partition, current, new))
    return plan, warnings


# --- list -------------------------------------------------------------------------------


def group_type_name(listing: object) -> str:
    """A listing's or a description's ConsumerGroupType: "CLASSIC", "CONSUMER" or
    "UNKNOWN" (a broker without KIP-848 does not say)."""
    return str(getattr(getattr(listing, "type", None), "name", "UNKNOWN"))


def list_rows(
    listings: Iterable[ConsumerGroupListing],
    member_counts: Mapping[str, int],
    states: Mapping[str, str] | None = None,
) -> list[tuple[str, str, str, str, str]]:
    """(group, type, state, protocol type, members) per group, by group id.

    librdkafka says only whether a group has a protocol type ("simple" groups, which
    commit offsets without joining, have none); every consumer client uses "consumer".
    It knows only the classic groups' states (a KIP-848 group Assigning or Reconciling
    is UNKNOWN to it): `states` are the states the broker named, where known.
    """
    rows = []
    for listing in sorted(listings, key=lambda g: g.group_id):
        count = member_counts.get(listing.group_id)
        state = (states or {}).get(listing.group_id)
        rows.append(
            (
                listing.group_id,
                group_type_name(listing).lower(),
                state or state_name(getattr(listing, "state", "UNKNOWN")),
                NONE if listing.is_simple_consumer_group else "consumer",
                NONE if count is None else str(count),
            )
        )
    return rows


def describe_header(description: ConsumerGroupDescription) -> str:
    node = description.coordinator
    coordinator = f"{node.id} ({node.host}:{node.port})" if node is not None else NONE
    return (
        f"Group: {description.group_id}   State: {state_name(description.state)}   "
        f"Assignor: {description.partition_assignor or NONE}   Coordinator: {coordinator}"
    )
