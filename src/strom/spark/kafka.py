"""The connector's I/O, through confluent-kafka: offsets on the driver, reads and writes in tasks.

The driver asks an AdminClient which partitions a subscription covers and where their
logs start and end: at the high watermark, or with kafka.isolation.level read_committed at
the last stable offset (ListOffsets at that isolation level, as Spark's Kafka source asks
through its consumer's setting). Each read task opens its own Consumer at the same
isolation level, assigned exactly one range with no consumer group and no commits, and
turns what it consumes into Arrow batches. Offsets a consumer is never given (transaction
markers; aborted records with read_committed) are skipped, not lost: a range is done once
the consumer is past its end, by a record at or after it or by reaching the log's end there. Each
write task opens its own idempotent Producer and returns only once the broker has
acknowledged every record it sent.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import pyarrow as pa
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from strom.spark.arrow import BatchBuilder, WritePlan, outgoing_records
from strom.spark.errors import BrokerError, DataLossError, OptionError, WriteError
from strom.spark.offsets import (
    AvailableOffsets,
    DataLoss,
    OffsetRange,
    TopicPartition,
    clamp_range,
)
from strom.spark.offsets import IsolationLevel as ReadIsolation
from strom.spark.options import ReadOptions, Subscription

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0
POLL_S = 0.5
CONSUME_BATCH = 10_000
ROWS_PER_ARROW_BATCH = 50_000
# Consumer settings for throughput; kafka.* options win over them.
CONSUMER_DEFAULTS = {
    "fetch.max.bytes": 52_428_800,
    "receive.message.max.bytes": 53_477_376,
    "queued.max.messages.kbytes": 262_144,
    "queued.min.messages": 1_000_000,
    "fetch.queue.backoff.ms": 0,
}
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_048_576,
    "batch.num.messages": 1_000_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}

# A transactional write task's transaction may stay open this long (Kafka's broker
# default allows up to 15 min); the broker aborts it after that. librdkafka's own default,
# 60 s, is shorter than a large task's write.
TRANSACTION_TIMEOUT_MS = 300_000

T = TypeVar("T")


def check_client_config(kind: str, config: Mapping[str, str]) -> None:
    """Let librdkafka judge the kafka.* options now, on the driver, without connecting."""
    base: dict[str, Any] = {"logger": _quiet_logger()}
    if kind == "consumer":
        base["group.id"] = "strom-spark-check"
    try:
        client = (Consumer if kind == "consumer" else Producer)(base | dict(config))
    except KafkaException as exc:
        text = exc.args[0].str() if exc.args else str(exc)
        named = [key for key in config if f'"{key}"' in text]
        option = f"kafka.{named[0]}" if named else "kafka.*"
        raise OptionError(option, text) from None
    if kind == "consumer":
        client.close()


def report(losses: Iterable[DataLoss], fail_on_data_loss: bool) -> None:
    """Fail on data loss, or log it and go on, as failOnDataLoss says."""
    for loss in losses:
        if fail_on_data_loss:
            raise DataLossError(
                f"strom: {loss.message()}. Set failOnDataLoss to false to skip lost records "
                "and go on."
            )
        log.warning("strom: %s; skipping them (failOnDataLoss is false)", loss.message())


class OffsetLookup:
    """Driver side: partitions of a subscription and the bounds of their logs."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        config: dict[str, Any] = {"bootstrap.servers": options.bootstrap_servers}
        config |= options.client_config
        self._login_error: str | None = None
        self._client = AdminClient(config | {"logger": _quiet_logger(), "error_cb": self._on_error})

    def _list_topics(self) -> Any:
        """The cluster's metadata, asked in one-second slices up to the request timeout,
        so that a refused login (which librdkafka reports only to the error callback)
        ends the wait at once."""
        deadline = time.monotonic() + _timeout()
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._client.list_topics(timeout=max(min(1.0, remaining), 0.1))
            except KafkaException:
                self._client.poll(0)  # serves the error callback
                if self._login_error is not None or remaining <= 1.0:
                    raise

    def _on_error(self, error: KafkaError) -> None:
        """librdkafka reports a refused login here; its calls only say the broker is
        unreachable, so the reason is kept for the message."""
        if error.code() == KafkaError._AUTHENTICATION:
            self._login_error = error.str()

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions it covers now (topics are never created by asking)."""
        metadata = self._retry("list topics", self._list_topics)
        counts = {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }
        return subscription.select(counts)

    def states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, AvailableOffsets]:
        """Log start and end per partition; with read_committed the end is the last stable
        offset, and the high watermark is asked for too."""
        wanted = list(partitions)
        earliest = self.offsets(wanted, _earliest_spec())
        latest = self.offsets(wanted, _latest_spec())
        if self._options.isolation_level is ReadIsolation.READ_UNCOMMITTED:
            return {tp: AvailableOffsets(earliest[tp], latest[tp]) for tp in wanted}
        log_end = self.offsets(wanted, _latest_spec(), IsolationLevel.READ_UNCOMMITTED)
        return {tp: AvailableOffsets(earliest[tp], latest[tp], log_end[tp]) for tp in wanted}

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.offsets(list(partitions), _earliest_spec())

    def by_timestamp(self, lookups: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The first offset at or after each timestamp; -1 where there is none."""
        result: dict[TopicPartition, int] = {}
        for timestamp_ms in sorted(set(lookups.values())):
            same = [tp for tp, ts in lookups.items() if ts == timestamp_ms]
            result.update(self.offsets(same, OffsetSpec.for_timestamp(timestamp_ms)))
        return result

    def offsets(
        self, partitions: list[TopicPartition], spec: Any, isolation: Any = None
    ) -> dict[TopicPartition, int]:
        """ListOffsets for `spec`, at the query's isolation level unless `isolation` is given
        (read_committed bounds "latest" and timestamp lookups by the last stable offset)."""
        if not partitions:
            return {}
        if isolation is None:
            isolation = _client_isolation(self._options.isolation_level)

        def ask() -> dict[TopicPartition, int]:
            request = {KafkaTopicPartition(tp.topic, tp.partition): spec for tp in partitions}
            futures = self._client.list_offsets(
                request, isolation_level=isolation, request_timeout=_timeout()
            )
            return {
                TopicPartition(ktp.topic, ktp.partition): int(future.result().offset)
                for ktp, future in futures.items()
            }

        return self._retry("list offsets", ask)

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        attempts = self._options.fetch_retries + 1
        for attempt in range(1, attempts + 1):
            self._login_error = None
            try:
                return call()
            except KafkaException as exc:
                self._client.poll(0)  # serves error_cb: a refused login's reason
                if attempt == attempts or self._login_error is not None:
                    # A refused login is not tried again: it would be refused again.
                    reason = self._login_error or str(exc)
                    raise BrokerError(
                        f"strom: could not {what} at {self._options.bootstrap_servers} "
                        f"after {attempt} attempt(s): {reason}"
                    ) from None
                log.info("strom: %s failed (%s); retrying", what, exc)
                time.sleep(self._options.fetch_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._client = None  # type: ignore[assignment]


def read_range(rng: OffsetRange, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches, read by a consumer of this task's own."""
    tp = rng.topic_partition
    config = (
        {"bootstrap.servers": options.bootstrap_servers}
        | CONSUMER_DEFAULTS
        | dict(options.client_config)
        | {
            "group.id": f"strom-spark-{secrets.token_hex(6)}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "isolation.level": options.isolation_level.value,
            "logger": _quiet_logger(),
        }
    )
    consumer = Consumer(config)
    try:
        rng = _readable(consumer, rng, options)
        if rng.size == 0:
            return
        consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, rng.start)])
        builder = BatchBuilder(tp.topic, tp.partition, options.include_headers)
        position, until = rng.start, rng.until
        stalled_since = time.monotonic()
        while position < until:
            # No more than the range still holds: librdkafka's consume() waits for as
            # many as asked (or POLL_S), and a range's last records would wait out POLL_S.
            messages = consumer.consume(min(CONSUME_BATCH, until - position), POLL_S)
            if messages:
                stalled_since = time.monotonic()
            elif time.monotonic() - stalled_since > options.poll_timeout_ms / 1000:
                raise BrokerError(
                    f"strom: no records from {tp} at offset {position} for "
                    f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)"
                )
            if _records_below(messages, until):
                builder.add_all(messages)  # the common case, in bulk
                position = cast(int, messages[-1].offset()) + 1
            else:
                for message in messages:
                    error = message.error()
                    if error is not None:
                        eof = error.code() == KafkaError._PARTITION_EOF
                        if eof and cast(int, message.offset()) >= until:
                            # The rest of the range gives no record: compacted away,
                            # transaction markers, aborted records (read_committed).
                            position = until
                            break
                        rng = _after_error(consumer, error, position, rng, options)
                        position, until = rng.start, rng.until
                        continue
                    offset = cast(int, message.offset())
                    if offset >= until:
                        position = until
                        break
                    builder.add(message)
                    position = offset + 1
            if len(builder) >= ROWS_PER_ARROW_BATCH:
                yield builder.build()
        if len(builder):
            yield builder.build()
    finally:
        consumer.close()


def _records_below(messages: list[Any], until: int) -> bool:
    """True if every message is a record (no error event) and all are before `until`."""
    if not messages or any(m.error() is not None for m in messages):
        return False
    return cast(int, messages[-1].offset()) < until


def _readable(consumer: Consumer, rng: OffsetRange, options: ReadOptions) -> OffsetRange:
    """The part of `rng` the log still holds; what is gone is reported as data loss. The
    consumer's watermarks are at its isolation level: the end is the last stable offset
    with read_committed, which the range was planned not to pass."""
    tp = rng.topic_partition
    low, high = consumer.get_watermark_offsets(
        KafkaTopicPartition(tp.topic, tp.partition), timeout=_timeout(), cached=False
    )
    clamped, losses = clamp_range(rng, low, high)
    report(losses, options.fail_on_data_loss)
    return clamped


def _after_error(
    consumer: Consumer, error: KafkaError, position: int, rng: OffsetRange, options: ReadOptions
) -> OffsetRange:
    """Deal with an error event: the end of the log, or an offset retention removed."""
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        # The log ends before the range does: it was cut since the range was planned.
        return _readable(consumer, OffsetRange(rng.topic_partition, position, rng.until), options)
    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        tp = rng.topic_partition
        rest = _readable(consumer, OffsetRange(tp, position, rng.until), options)
        consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, rest.start)])
        return rest
    raise BrokerError(f"strom: reading {rng.topic_partition} failed: {error.str()}")


@dataclass(slots=True)
class WriteSummary:
    records: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)


class RecordWriter:
    """One task's producer: sends rows as records, then waits for every acknowledgement."""

    def __init__(
        self,
        bootstrap_servers: str,
        client_config: Mapping[str, str],
        transactional_id: str | None = None,
    ) -> None:
        config = {"bootstrap.servers": bootstrap_servers} | PRODUCER_DEFAULTS | dict(client_config)
        if transactional_id is not None:
            config = (
                {"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}
                | config
                | {"transactional.id": transactional_id}
            )
        self._bootstrap = bootstrap_servers
        self._producer = Producer(
            config
            | {
                "logger": _quiet_logger(),
                "on_delivery": self._delivered,
                "delivery.report.only.error": True,  # successes need no callback
            }
        )
        self._partition_counts: dict[str, int] = {}
        self._failures: list[str] = []
        self._failure_count = 0

    @property
    def producer(self) -> Producer:
        return self._producer

    def write(self, batches: Iterable[pa.RecordBatch], plan: WritePlan) -> WriteSummary:
        summary = WriteSummary()
        per_topic = summary.per_topic
        counts = self._partition_counts
        produce = self._producer.produce
        row = 0
        for batch in batches:
            for topic, partition, key, value, headers, timestamp_ms in outgoing_records(
                batch, plan
            ):
                row += 1
                if topic is None or (partitions := counts.get(topic)) is None:
                    topic, partitions = self._partitions(topic, row)
                if partition is None:
                    partition = -1  # the producer's partitioner picks one
                elif not 0 <= partition < partitions:
                    raise WriteError(
                        f"strom: row {row} of this task: topic {topic!r} has no partition "
                        f"{partition} (it has {partitions})"
                    )
                try:
                    produce(
                        topic, value, key, partition, timestamp=timestamp_ms or 0, headers=headers
                    )
                except BufferError:  # the local queue is full: let it drain, then retry
                    while True:
                        self._producer.poll(0.05)
                        try:
                            produce(
                                topic,
                                value,
                                key,
                                partition,
                                timestamp=timestamp_ms or 0,
                                headers=headers,
                            )
                            break
                        except BufferError:
                            continue
                per_topic[topic] = per_topic.get(topic, 0) + 1
                if row % 10_000 == 0:
                    self._producer.poll(0)
        self._flush()
        summary.records = row
        return summary

    def _partitions(self, topic: str | None, row: int) -> tuple[str, int]:
        """The topic's partition count, asked once per task (which may create the topic,
        where the broker creates topics on first use)."""
        if topic is None:
            raise WriteError(f"strom: row {row} of this task has no topic (its topic is null)")
        count = self._partition_counts.get(topic)
        if count is not None:
            return topic, count
        try:
            metadata = self._producer.list_topics(topic, timeout=_timeout())
        except KafkaException as exc:
            raise BrokerError(f"strom: cannot reach {self._bootstrap}: {exc}") from None
        described = metadata.topics.get(topic)
        error = described.error if described is not None else None
        if described is None or error is not None or not described.partitions:
            missing = error is None or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            why = "it does not exist" if missing or error is None else error.str()
            raise WriteError(
                f"strom: row {row} of this task: cannot write to topic {topic!r}: {why} "
                "(create it first, e.g. `strom topic create`, or let the broker create "
                "topics on first use with auto.create.topics.enable=true)"
            )
        self._partition_counts[topic] = len(described.partitions)
        return topic, len(described.partitions)

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self._failure_count += 1
            if len(self._failures) < 3:
                self._failures.append(error.str())

    def _flush(self) -> None:
        while self._producer.flush(1.0):
            pass
        if self._failure_count:
            first = "; ".join(self._failures)
            raise WriteError(
                f"strom: the broker did not acknowledge {self._failure_count} record(s): {first}"
            )


def _timeout() -> float:
    return REQUEST_TIMEOUT_S


def _quiet_logger() -> logging.Logger:
    """librdkafka's log lines go to Python logging, without its config-scope warnings."""
    logger = logging.getLogger("strom.spark.librdkafka")
    if not logger.filters:
        logger.addFilter(
            lambda record: not (isinstance(record.args, tuple) and record.args[:1] == ("CONFWARN",))
        )
    return logger


def _client_isolation(level: ReadIsolation) -> Any:
    if level is ReadIsolation.READ_COMMITTED:
        return IsolationLevel.READ_COMMITTED
    return IsolationLevel.READ_UNCOMMITTED


def _earliest_spec() -> Any:
    return OffsetSpec.earliest()  # type: ignore[no-untyped-call]


def _latest_spec() -> Any:
    return OffsetSpec.latest()  # type: ignore[no-untyped-call]
