"""Batch and streaming readers of the `strom` data source.

Planning happens on the driver: which partitions, which offsets, how ranges are cut into
Spark tasks (one task per range). Each task then reads its range with `read_range`. With
kafka.isolation.level read_committed, "latest" is each partition's last stable offset, so
no range reaches into a transaction still open.

The streaming reader keeps nothing that matters between calls except the
Trigger.AvailableNow target: every offset it hands Spark is in Spark's checkpoint, so a
query stopped or killed anywhere restarts from there and re-plans the same ranges.

StromStreamReader: created -> [prepareForTriggerAvailableNow: target fixed] ->
    (latestOffset -> partitions -> commit)* -> stop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from strom.spark.errors import OptionError, StromSparkError
from strom.spark.kafka import OffsetLookup, read_range, report
from strom.spark.offsets import (
    AvailableOffsets,
    DataLoss,
    LossKind,
    OffsetRange,
    Offsets,
    Side,
    TopicPartition,
    check_within,
    next_end,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    plan_micro_batch,
    resolve,
    split_ranges,
    timestamp_lookups,
)
from strom.spark.options import ReaderKind, ReadOptions, SubscriptionKind

log = logging.getLogger(__name__)


def current_states(
    lookup: OffsetLookup, options: ReadOptions, *, at_start: bool
) -> dict[TopicPartition, AvailableOffsets]:
    """The subscription's partitions now, with their log bounds. At the start of a query
    every assigned partition must exist; later a missing one is data loss."""
    partitions = lookup.partitions(options.subscription)
    if at_start and options.subscription.kind is SubscriptionKind.ASSIGN:
        missing = sorted(set(options.subscription.assigned) - set(partitions))
        if missing:
            raise OptionError("assign", f"{', '.join(map(str, missing))} does not exist")
    return lookup.states(partitions)


def resolve_side(
    lookup: OffsetLookup,
    options: ReadOptions,
    side: Side,
    states: Mapping[TopicPartition, AvailableOffsets],
) -> Offsets:
    request, option = (
        (options.starting, options.starting_option)
        if side is Side.START
        else (options.ending, options.ending_option)
    )
    found = lookup.by_timestamp(timestamp_lookups(request, states))
    return resolve(request, option, side, states, found, options.timestamp_strategy)


def read_partition(partition: InputPartition, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    value = getattr(partition, "value", None)
    if not isinstance(value, OffsetRange):  # Spark's placeholder when there is nothing to read
        return iter(())
    if options.reader is ReaderKind.BATCHES:
        # Imported here: only tasks need strom's client, not the driver's planning process.
        from strom.spark.fetch_reader import read_range_batches

        return read_range_batches(value, options)
    return read_range(value, options)


class StromBatchReader(DataSourceReader):
    """spark.read: the offsets between startingOffsets and endingOffsets, fixed at planning."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        lookup = OffsetLookup(self.options)
        try:
            states = current_states(lookup, self.options, at_start=True)
            start = resolve_side(lookup, self.options, Side.START, states)
            end = resolve_side(lookup, self.options, Side.END, states)
        finally:
            lookup.close()
        ranges, losses = plan_batch(
            start,
            end,
            states,
            start_option=self.options.starting_option,
            end_option=self.options.ending_option,
            isolation=self.options.isolation_level,
        )
        report(losses, self.options.fail_on_data_loss)
        pieces = split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records=self.options.max_records_per_partition,
        )
        log.info("strom: batch read of %d range(s)", len(pieces))
        return [InputPartition(piece) for piece in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options)


class StromStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: offsets per topic and partition, as Spark checkpoints them."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._lookup: OffsetLookup | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}  # tasks need the options, not the driver's client

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._lookup, self._target, self._latest = None, None, None

    def _client(self) -> OffsetLookup:
        if self._lookup is None:
            self._lookup = OffsetLookup(self.options)
        return self._lookup

    def initialOffset(self) -> dict[str, Any]:
        lookup = self._client()
        states = current_states(lookup, self.options, at_start=True)
        start = resolve_side(lookup, self.options, Side.START, states)
        check_within(self.options.starting_option, start, states, self.options.isolation_level)
        log.info("strom: stream starts at %s", offsets_to_json(start))
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        states = current_states(self._client(), self.options, at_start=False)
        self._target = {tp: state.latest for tp, state in states.items()}
        log.info("strom: Trigger.AvailableNow reads up to %s", offsets_to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if isinstance(limit, ReadMaxRows):
            max_records: int | None = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_records = None
        else:
            raise StromSparkError(f"strom: read limit {limit!r} is not supported")
        states = current_states(self._client(), self.options, at_start=False)
        end, losses = next_end(
            offsets_from_json(start), states, max_records=max_records, target=self._target
        )
        report(losses, self.options.fail_on_data_loss)
        self._latest = {tp: state.latest for tp, state in states.items()}
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        first, last = offsets_from_json(start), offsets_from_json(end)
        if first == last:
            return []
        lookup = self._client()
        existing = set(lookup.partitions(self.options.subscription))
        gone = sorted(tp for tp in last if tp not in existing and last[tp] > first.get(tp, 0))
        report(
            (DataLoss(LossKind.VANISHED, tp, first.get(tp, 0), last[tp]) for tp in gone),
            self.options.fail_on_data_loss,
        )
        last = {tp: offset for tp, offset in last.items() if tp in existing}
        ranges, losses = plan_micro_batch(first, last, lookup.earliest(last))
        report(losses, self.options.fail_on_data_loss)
        pieces = split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records=self.options.max_records_per_partition,
        )
        return [InputPartition(piece) for piece in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options)

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("strom: Spark committed %s", end)

    def stop(self) -> None:
        if self._lookup is not None:
            self._lookup.close()
            self._lookup = None
