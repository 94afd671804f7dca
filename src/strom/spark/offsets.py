"""Where a read starts and ends, per topic and partition: the connector's offset decisions.

Pure: the broker's answers (log start, high watermark, offsets found by timestamp) come in
as values, plans and detected data loss come out. The I/O lives in `strom.spark.kafka`.

Offsets in option JSON and in Spark's checkpoint have one shape, `{"topic": {"0": 42}}`;
in `startingOffsets`/`endingOffsets`, -2 means earliest and -1 latest. A range is
half-open: `start` is the first offset read, `until` the first offset not read.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise
from typing import Any, NamedTuple

from strom.spark.errors import OptionError, StromSparkError

EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Offsets = dict[TopicPartition, int]


class Boundary(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"


class Side(Enum):
    START = "start"
    END = "end"


class IsolationLevel(Enum):
    """Which records a read sees (`kafka.isolation.level`, named as Kafka's consumers name it).

    READ_UNCOMMITTED: every record, those of aborted and of still open transactions too,
    up to the high watermark. READ_COMMITTED: non-transactional records and those of
    committed transactions, up to the last stable offset (LSO: the first offset of the
    oldest transaction still open, or the high watermark when none is). Either way some
    offsets are never read: transaction markers, and with READ_COMMITTED aborted records,
    so a range may end on offsets that give no record.
    """

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


class TimestampStrategy(Enum):
    """What a starting timestamp with no record at or after it resolves to."""

    ERROR = "error"
    LATEST = "latest"


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Offsets per partition from JSON; may hold EARLIEST and LATEST."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """One timestamp (ms since the epoch) for every partition."""

    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class PartitionTimestamps:
    """A timestamp (ms since the epoch) per partition, from JSON."""

    timestamps_ms: Mapping[TopicPartition, int]


OffsetRequest = Boundary | SpecificOffsets | GlobalTimestamp | PartitionTimestamps


@dataclass(frozen=True, slots=True)
class AvailableOffsets:
    """What the broker says about one partition: its log start offset, and where a read
    ends: the high watermark, or the last stable offset for READ_COMMITTED. Then
    `high_watermark` is the log's end, past which an offset means the log was rewound;
    None when it is `latest`."""

    earliest: int
    latest: int
    high_watermark: int | None = None

    @property
    def log_end(self) -> int:
        return self.latest if self.high_watermark is None else self.high_watermark


@dataclass(frozen=True, slots=True)
class OffsetRange:
    topic_partition: TopicPartition
    start: int
    until: int

    @property
    def size(self) -> int:
        return max(0, self.until - self.start)


class LossKind(Enum):
    DELETED = "deleted"  # retention removed records before they were read
    VANISHED = "vanished"  # the partition no longer exists (or is no longer subscribed)
    REWOUND = "rewound"  # the log ends before where the query had got to
    TRUNCATED = "truncated"  # the log ends before the end of a planned range


@dataclass(frozen=True, slots=True)
class DataLoss:
    """Records a query needed and cannot read: `expected` is the first offset it needed,
    `available` where reading can go on (the log start, or the log end)."""

    kind: LossKind
    topic_partition: TopicPartition
    expected: int
    available: int

    def message(self) -> str:
        tp, expected, available = self.topic_partition, self.expected, self.available
        if self.kind is LossKind.DELETED:
            return (
                f"records {expected}..{available - 1} of {tp} were deleted (retention) "
                f"before they were read; the log now starts at {available}"
            )
        if self.kind is LossKind.VANISHED:
            return (
                f"partition {tp} is gone (deleted, or no longer subscribed); the query had "
                f"read it up to {expected}"
            )
        if self.kind is LossKind.REWOUND:
            return (
                f"partition {tp} now ends at {available}, before offset {expected} the query "
                "had already reached: the topic was deleted and created again"
            )
        return (
            f"partition {tp} ends at {available}, but records up to {expected - 1} were "
            "planned: the topic was deleted and created again"
        )


# ---- parsing option values ----------------------------------------------------------------


def parse_offsets(option: str, text: str, side: Side) -> Boundary | SpecificOffsets:
    """`earliest`, `latest` or JSON offsets; ending offsets cannot be `earliest`/-2."""
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        if side is Side.END and word == "earliest":
            raise OptionError(option, "ending offsets cannot be 'earliest'; use 'latest' or JSON")
        return Boundary(word)
    offsets = _partition_map(option, text, "offset")
    for tp, offset in offsets.items():
        lowest = LATEST if side is Side.END else EARLIEST
        if offset < lowest:
            allowed = "-1 (latest)" if side is Side.END else "-2 (earliest), -1 (latest)"
            raise OptionError(
                option, f"offset {offset} for {tp} is not an offset; use >= 0, or {allowed}"
            )
    return SpecificOffsets(offsets)


def parse_timestamp(option: str, text: str) -> GlobalTimestamp:
    return GlobalTimestamp(_non_negative(option, text.strip(), "timestamp (ms since the epoch)"))


def parse_partition_timestamps(option: str, text: str) -> PartitionTimestamps:
    timestamps = _partition_map(option, text, "timestamp")
    for tp, timestamp_ms in timestamps.items():
        if timestamp_ms < 0:
            raise OptionError(option, f"timestamp {timestamp_ms} for {tp} is negative")
    return PartitionTimestamps(timestamps)


def _partition_map(option: str, text: str, what: str) -> dict[TopicPartition, int]:
    example = '{"topic": {"0": 42, "1": -2}}'
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            option, f"expected 'earliest', 'latest' or JSON like {example}: {exc}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(option, f"expected a non-empty JSON object like {example}")
    result: dict[TopicPartition, int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(option, f"topic {topic!r} needs an object of partition: {what}")
        for partition, value in partitions.items():
            number = _whole(partition)
            if number is None or number < 0:
                raise OptionError(option, f"{partition!r} in topic {topic!r} is not a partition")
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    option, f"{what} for {topic}-{partition} must be a whole number, got {value!r}"
                )
            result[TopicPartition(topic, number)] = value
    return result


def _whole(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def _non_negative(option: str, text: str, what: str) -> int:
    number = _whole(text)
    if number is None:
        raise OptionError(option, f"expected a {what}, got {text!r}")
    return number


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint shape, topics and partitions in order."""
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def offsets_from_json(data: Mapping[str, Any]) -> Offsets:
    try:
        return {
            TopicPartition(topic, int(partition)): int(offset)
            for topic, partitions in data.items()
            for partition, offset in partitions.items()
        }
    except (AttributeError, TypeError, ValueError) as exc:
        raise StromSparkError(f"strom: offsets {data!r} are not strom's: {exc}") from None


# ---- resolving a request against the broker's answers --------------------------------------


def timestamp_lookups(
    request: OffsetRequest, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The timestamp to look up per partition (empty unless the request is by time)."""
    if isinstance(request, GlobalTimestamp):
        return dict.fromkeys(partitions, request.timestamp_ms)
    if isinstance(request, PartitionTimestamps):
        wanted = set(partitions)
        return {tp: ts for tp, ts in request.timestamps_ms.items() if tp in wanted}
    return {}


def resolve(
    request: OffsetRequest,
    option: str,
    side: Side,
    states: Mapping[TopicPartition, AvailableOffsets],
    found_by_time: Mapping[TopicPartition, int | None],
    strategy: TimestampStrategy = TimestampStrategy.ERROR,
) -> Offsets:
    """Concrete offsets for every partition in `states`.

    `found_by_time` holds, per partition, the first offset whose timestamp is at or after
    the looked-up one (None: no such record). A starting timestamp without a record fails
    unless `strategy` is LATEST; an ending one resolves to latest, as Kafka's does.
    """
    if isinstance(request, Boundary):
        pick = "earliest" if request is Boundary.EARLIEST else "latest"
        return {tp: getattr(state, pick) for tp, state in states.items()}
    if isinstance(request, SpecificOffsets | PartitionTimestamps):
        given = request.offsets if isinstance(request, SpecificOffsets) else request.timestamps_ms
        _check_covers(option, set(given), set(states))
    if isinstance(request, SpecificOffsets):
        result: Offsets = {}
        for tp, state in states.items():
            offset = request.offsets[tp]
            result[tp] = state.earliest if offset == EARLIEST else offset
            result[tp] = state.latest if offset == LATEST else result[tp]
        return result
    result = {}
    for tp, state in states.items():
        found = found_by_time.get(tp)
        if found is not None and found >= 0:
            result[tp] = found
        elif side is Side.END or strategy is TimestampStrategy.LATEST:
            result[tp] = state.latest
        else:
            raise OptionError(
                option,
                f"{tp} has no record at or after the timestamp; set "
                "startingOffsetsByTimestampStrategy to 'latest' to start at the end instead",
            )
    return result


def _check_covers(option: str, given: set[TopicPartition], existing: set[TopicPartition]) -> None:
    missing = sorted(existing - given)
    unknown = sorted(given - existing)
    if unknown:
        names = ", ".join(map(str, unknown))
        raise OptionError(option, f"names {names}, which the subscription does not have")
    if missing:
        names = ", ".join(map(str, missing))
        raise OptionError(
            option,
            f"must name every partition of the subscription; missing {names} "
            "(use -2 for earliest, -1 for latest)",
        )


# ---- batch queries ------------------------------------------------------------------------


def check_within(
    option: str,
    offsets: Mapping[TopicPartition, int],
    states: Mapping[TopicPartition, AvailableOffsets],
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> None:
    """An offset past a partition's end is a mistake in the option, not data loss. With
    READ_COMMITTED the end is the last stable offset: a read waits for nothing."""
    for tp in sorted(offsets):
        if tp not in states or offsets[tp] <= states[tp].latest:
            continue
        if isolation is IsolationLevel.READ_COMMITTED:
            raise OptionError(
                option,
                f"{tp} can be read up to its last stable offset {states[tp].latest} with "
                f"kafka.isolation.level read_committed (a transaction is open there), not "
                f"to {offsets[tp]}",
            )
        raise OptionError(
            option, f"{tp} ends at {states[tp].latest}; it has no offset {offsets[tp]}"
        )


def plan_batch(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    states: Mapping[TopicPartition, AvailableOffsets],
    *,
    start_option: str,
    end_option: str,
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> tuple[list[OffsetRange], list[DataLoss]]:
    """The ranges of a batch query; a start before the log start is data loss. `states`
    hold the end `isolation` reads to (the last stable offset for READ_COMMITTED)."""
    check_within(start_option, start, states, isolation)
    check_within(end_option, end, states, isolation)
    ranges: list[OffsetRange] = []
    losses: list[DataLoss] = []
    for tp in sorted(states):
        state, first, until = states[tp], start[tp], end[tp]
        if first > until:
            raise OptionError(end_option, f"{tp} would end at {until}, before its start {first}")
        if first < state.earliest:
            losses.append(DataLoss(LossKind.DELETED, tp, first, min(state.earliest, until)))
            first = min(state.earliest, until)
        if until > first:
            ranges.append(OffsetRange(tp, first, until))
    return ranges, losses


# ---- streaming queries --------------------------------------------------------------------


def next_end(
    start: Mapping[TopicPartition, int],
    states: Mapping[TopicPartition, AvailableOffsets],
    *,
    max_records: int | None,
    target: Mapping[TopicPartition, int] | None = None,
) -> tuple[Offsets, list[DataLoss]]:
    """The end offsets of the next micro-batch.

    A partition missing from `start` is new and starts at 0. A partition in `start` that
    the broker no longer has is reported and left out. One whose start is past `latest`
    but not past the log's end (read_committed, checkpointed by a read_uncommitted run)
    waits for the last stable offset to pass it. With `target` (Trigger.AvailableNow)
    no partition goes past its target and partitions outside it wait. With `max_records`
    the records are shared out by `share_limit`, counted from where reading can resume
    (the log start when retention got there first).
    """
    losses = [
        DataLoss(LossKind.VANISHED, tp, offset, offset)
        for tp, offset in sorted(start.items())
        if tp not in states
    ]
    resume: Offsets = {}
    caps: Offsets = {}
    end: Offsets = {}
    for tp, state in sorted(states.items()):
        if target is not None and tp not in target:
            if tp in start:
                end[tp] = start[tp]
            continue
        first = start.get(tp, 0)
        cap = state.latest if target is None else min(state.latest, target[tp])
        if first > state.log_end or first < state.earliest:
            first = min(state.earliest, cap)  # rewound or deleted: reported when planned
        resume[tp], caps[tp] = first, max(first, cap)
    backlog = {tp: caps[tp] - resume[tp] for tp in resume}
    granted = backlog if max_records is None else share_limit(backlog, max_records)
    for tp, first in resume.items():
        end[tp] = first + granted[tp]
        if granted[tp] == 0 and tp in start and start[tp] <= states[tp].latest:
            end[tp] = start[tp]  # nothing to read: keep the offset as it was
    return end, losses


def plan_micro_batch(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
) -> tuple[list[OffsetRange], list[DataLoss]]:
    """The ranges between two checkpointed offsets; `earliest` is each log's start now.

    A partition new in `end` starts at 0. An end before its start means the log was
    rewound (the topic recreated): reading goes on from the new log's start. A start
    before the log start means retention deleted records first.
    """
    ranges: list[OffsetRange] = []
    losses: list[DataLoss] = []
    for tp in sorted(end):
        first, until = start.get(tp, 0), end[tp]
        log_start = earliest.get(tp, 0)
        if until < first:
            losses.append(DataLoss(LossKind.REWOUND, tp, first, until))
            first = min(log_start, until)
        elif first < log_start:
            losses.append(DataLoss(LossKind.DELETED, tp, first, min(log_start, until)))
            first = min(log_start, until)
        if until > first:
            ranges.append(OffsetRange(tp, first, until))
    return ranges, losses


def clamp_range(rng: OffsetRange, earliest: int, latest: int) -> tuple[OffsetRange, list[DataLoss]]:
    """What a task can still read of its range, given the log's bounds when it starts."""
    losses: list[DataLoss] = []
    first, until = rng.start, rng.until
    if first < earliest:
        losses.append(DataLoss(LossKind.DELETED, rng.topic_partition, first, min(earliest, until)))
        first = min(earliest, until)
    if until > latest:
        losses.append(DataLoss(LossKind.TRUNCATED, rng.topic_partition, until, latest))
        until = max(first, latest)
    return OffsetRange(rng.topic_partition, first, until), losses


# ---- admission control and splitting ------------------------------------------------------


def share_limit(backlog: Mapping[TopicPartition, int], limit: int) -> dict[TopicPartition, int]:
    """Split `limit` records over partitions in proportion to their backlog.

    The total granted is exactly min(limit, total backlog). A partition whose share is
    below one record still gets one when the limit allows (so none waits forever behind
    busier ones); the others share the rest in proportion to backlog, rounded by largest
    remainder (ties: larger backlog, then partition order).
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    waiting = {tp: n for tp, n in backlog.items() if n > 0}
    granted = dict.fromkeys(backlog, 0)
    total = sum(waiting.values())
    if total <= limit:
        granted.update(waiting)
        return granted
    order = sorted(waiting, key=lambda tp: (-waiting[tp], tp))
    if limit < len(order):
        granted.update(dict.fromkeys(order[:limit], 1))
        return granted
    large, rest, rest_total = order, limit, total
    while True:  # give one record to each partition whose share is below one, until none is
        small = [tp for tp in large if waiting[tp] * rest < rest_total]
        if not small:
            break
        granted.update(dict.fromkeys(small, 1))
        large = [tp for tp in large if waiting[tp] * rest >= rest_total]
        rest -= len(small)
        rest_total = sum(waiting[tp] for tp in large)
    if not large:
        return granted
    shares = {tp: waiting[tp] * rest for tp in large}
    for tp in large:
        granted[tp] = shares[tp] // rest_total
    left = rest - sum(granted[tp] for tp in large)
    by_remainder = sorted(large, key=lambda tp: (-(shares[tp] % rest_total), -waiting[tp], tp))
    for tp in by_remainder[:left]:
        granted[tp] += 1
    return granted


def split_ranges(
    ranges: Iterable[OffsetRange], *, min_partitions: int | None, max_records: int | None
) -> list[OffsetRange]:
    """Cut ranges so none holds more than `max_records` and, where records allow, there are
    at least `min_partitions` of them (the largest is halved until there are)."""
    pieces: list[OffsetRange] = []
    for rng in ranges:
        if rng.size == 0:
            continue
        count = 1 if max_records is None else -(-rng.size // max_records)
        pieces.extend(_cut(rng, count))
    if min_partitions is None or len(pieces) >= min_partitions:
        return pieces
    heap = [(-rng.size, index, rng) for index, rng in enumerate(pieces)]
    heapq.heapify(heap)
    serial = len(heap)
    while len(heap) < min_partitions and heap and -heap[0][0] >= 2:
        _, _, largest = heapq.heappop(heap)
        for half in _cut(largest, 2):
            heapq.heappush(heap, (-half.size, serial, half))
            serial += 1
    return sorted((item[2] for item in heap), key=lambda r: (r.topic_partition, r.start))


def _cut(rng: OffsetRange, count: int) -> list[OffsetRange]:
    size, tp = rng.size, rng.topic_partition
    bounds = [rng.start + size * i // count for i in range(count + 1)]
    return [OffsetRange(tp, a, b) for a, b in pairwise(bounds) if b > a]
