"""The `strom` data source: what Spark instantiates for spark.read/readStream/write/writeStream.

Options are checked on the driver before any task starts (OptionError, SchemaError);
the readers are in `strom.spark.reader`, the writers here.

Writes are at least once by default: a task returns only after the broker acknowledged
every record it sent (acks=all, idempotent producer), and Spark records a micro-batch as
done only after every task returned. A batch interrupted before that is written again when
the query restarts, so records it had already written appear twice; none are lost. With
exactlyOnce=true each task writes in a Kafka transaction of its own that it leaves open,
the driver's commit ends them (txn_coordinator), and a replayed task whose transaction
committed writes nothing (strom.spark.exactly_once, txn_writer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from strom.spark import NAME
from strom.spark.arrow import WritePlan, plan_write, read_schema_ddl, read_schema_simple
from strom.spark.errors import OptionError, SchemaError, StromSparkError, WriteError
from strom.spark.exactly_once import (
    BATCH_ID_PROPERTY,
    BATCH_WRITE_ID,
    QUERY_ID_PROPERTY,
    TaskSlot,
    batch_id_of,
    default_prefix,
    of_write,
    task_slot,
)
from strom.spark.kafka import RecordWriter, check_client_config
from strom.spark.options import (
    ReadOptions,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from strom.spark.reader import StromBatchReader, StromStreamReader

if TYPE_CHECKING:  # the transactional parts load strom's client, which planning never needs
    from strom.spark.txn_coordinator import PendingTransaction

log = logging.getLogger(__name__)


class StromDataSource(DataSource):
    """Reads and writes strom topics (or any Kafka-compatible broker's) as DataFrames."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return read_schema_ddl(_read_options_either_way(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return StromBatchReader(self._read_options(schema, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StromStreamReader(self._read_options(schema, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> StromBatchWriter:
        if overwrite:
            raise OptionError("mode", "topics are append-only; use .mode('append')")
        options, plan = self._write_plan(schema, streaming=False)
        return StromBatchWriter(options, plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StromStreamWriter:
        # overwrite is set for the complete output mode: every row of the result is sent
        # again each micro-batch, as Spark's Kafka sink does.
        options, plan = self._write_plan(schema, streaming=True)
        return StromStreamWriter(options, plan)

    def _read_options(self, schema: StructType, *, streaming: bool) -> ReadOptions:
        options = parse_read_options(self.options, streaming=streaming)
        expected = read_schema_simple(options.include_headers)
        if schema.simpleString() != expected:
            raise SchemaError(
                f"the schema of a strom read is fixed ({expected}); do not set one with "
                f".schema(), got {schema.simpleString()}"
            )
        check_client_config("consumer", options.client_config)
        return options

    def _write_plan(self, schema: StructType, *, streaming: bool) -> tuple[WriteOptions, WritePlan]:
        options = parse_write_options(self.options, streaming=streaming)
        fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        plan = plan_write(fields, options.topic)
        check_client_config("producer", options.client_config)
        return options, plan


def _read_options_either_way(options: Mapping[str, str]) -> ReadOptions:
    """Check read options before Spark says whether the read is a batch or a stream:
    fine if they suit either."""
    try:
        return parse_read_options(options, streaming=False)
    except OptionError as batch_error:
        try:
            return parse_read_options(options, streaming=True)
        except OptionError:
            raise batch_error from None


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one write task sent; the broker acknowledged all of it. `skipped`: an
    exactly-once task found its part of the batch committed before, and wrote nothing."""

    records: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    pending: PendingTransaction | None = None  # exactly once: for the driver to end
    prefix: str | None = None  # exactly once: the write's transactional id prefix


def _write(
    options: WriteOptions, plan: WritePlan, batches: Iterator[pa.RecordBatch], *, streaming: bool
) -> WriteCommit:
    if options.exactly_once:
        prefix, slot = _task_slot(options, streaming)
        from strom.spark.txn_writer import write_in_transaction

        written = write_in_transaction(options, plan, slot, batches)
        if written is None:
            return WriteCommit(skipped=True, prefix=prefix)
        summary, pending = written
        return WriteCommit(summary.records, summary.per_topic, pending=pending, prefix=prefix)
    else:
        summary = RecordWriter(options.bootstrap_servers, options.client_config).write(
            batches, plan
        )
    return WriteCommit(summary.records, summary.per_topic)


def _task_slot(options: WriteOptions, streaming: bool) -> tuple[str, TaskSlot]:
    """This task's prefix and slot, from Spark's task context (partition id, the query's
    batch id)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise WriteError("strom: an exactly-once write runs only inside a Spark task")
    if not streaming:
        prefix = options.transactional_id_prefix
        assert prefix is not None  # parse_write_options checks it
        return prefix, task_slot(
            prefix, context.partitionId(), BATCH_WRITE_ID, context.attemptNumber()
        )
    batch_id = batch_id_of(context.getLocalProperty(BATCH_ID_PROPERTY))
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    if batch_id is None or not query_id:
        raise WriteError(
            f"strom: Spark did not tell this task its micro-batch ({BATCH_ID_PROPERTY}) "
            f"or query ({QUERY_ID_PROPERTY}); exactlyOnce needs both"
        )
    prefix = options.transactional_id_prefix or default_prefix(query_id)
    return prefix, task_slot(prefix, context.partitionId(), batch_id, context.attemptNumber())


def _totals(messages: list[WriterCommitMessage | None]) -> tuple[int, dict[str, int]]:
    per_topic: dict[str, int] = {}
    for message in messages:
        if isinstance(message, WriteCommit):
            for topic, count in message.per_topic.items():
                per_topic[topic] = per_topic.get(topic, 0) + count
    return sum(per_topic.values()), per_topic


def _skipped(messages: list[WriterCommitMessage | None]) -> int:
    return sum(1 for m in messages if isinstance(m, WriteCommit) and m.skipped)


def _end_transactions(
    options: WriteOptions, messages: list[WriterCommitMessage | None], *, commit: bool
) -> None:
    """Commit (or abort) the transactions the tasks left open, then abort every other
    transaction of the write's prefix still open: attempts whose messages Spark dropped
    (failed, speculative or killed ones, whose Python workers may still be running), and
    tasks of a run that died. A commit refused (a transaction the broker timed out)
    raises: Spark fails the batch, and its replay writes again what did not commit. A
    write without exactlyOnce has no transactions."""
    if not options.exactly_once:
        return
    from strom.spark.txn_coordinator import end_transaction, security_of

    security = security_of(options.client_config)
    for message in messages:
        if isinstance(message, WriteCommit) and message.pending is not None:
            if commit:
                end_transaction(
                    options.bootstrap_servers, message.pending, commit=True, security=security
                )
                continue
            try:
                end_transaction(
                    options.bootstrap_servers, message.pending, commit=False, security=security
                )
            except StromSparkError as exc:  # fenced or gone: it ends without us
                log.warning("%s", exc)
    prefixes = {m.prefix for m in messages if isinstance(m, WriteCommit) and m.prefix}
    prefix = options.transactional_id_prefix or next(iter(prefixes), None)
    if prefix is None:
        log.warning(
            "strom: no task of the write finished; transactions its tasks left open "
            "end when the broker times them out or the write runs again"
        )
        return
    _abort_the_others(options, prefix)


def _abort_the_others(options: WriteOptions, prefix: str) -> None:
    """Take over the id of every transaction of `prefix` still open, which aborts it, so
    that read_committed consumers do not wait for the broker's timeout. Best effort: one
    that cannot be aborted now ends at that timeout, or when the next write takes it."""
    from strom.spark.txn_coordinator import open_transactions, security_of
    from strom.spark.txn_writer import fence

    try:
        open_ids = open_transactions(options.bootstrap_servers, security_of(options.client_config))
    except StromSparkError as exc:
        log.warning("%s", exc)
        return
    for transactional_id in sorted(i for i in open_ids if of_write(prefix, i)):
        log.info("strom: aborting %s, a transaction no task of the write kept", transactional_id)
        fence(options, transactional_id)


class StromBatchWriter(DataSourceArrowWriter):
    """df.write: one producer per task; records stay written even if another task fails."""

    def __init__(self, options: WriteOptions, plan: WritePlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        return _write(self.options, self.plan, iterator, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _end_transactions(self.options, messages, commit=True)
        total, per_topic = _totals(messages)
        log.info(
            "strom: wrote %d record(s): %s (%d task(s) committed earlier)",
            total,
            per_topic,
            _skipped(messages),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _end_transactions(self.options, messages, commit=False)
        total, _ = _totals(messages)
        if self.options.exactly_once:
            log.warning("strom: write failed; the tasks' transactions are aborted")
            return
        log.warning(
            "strom: write failed; %d record(s) from tasks that finished stay in their topics",
            total,
        )


class StromStreamWriter(DataSourceStreamArrowWriter):
    """writeStream: at least once, or exactly once; see the module docstring."""

    def __init__(self, options: WriteOptions, plan: WritePlan) -> None:
        self.options = options
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        return _write(self.options, self.plan, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _end_transactions(self.options, messages, commit=True)
        total, per_topic = _totals(messages)
        log.info(
            "strom: micro-batch %d wrote %d record(s): %s (%d task(s) committed earlier)",
            batchId,
            total,
            per_topic,
            _skipped(messages),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _end_transactions(self.options, messages, commit=False)
        total, _ = _totals(messages)
        if self.options.exactly_once:
            log.warning(
                "strom: micro-batch %d failed; its tasks' transactions are aborted, and "
                "it is written once when the query restarts",
                batchId,
            )
            return
        log.warning(
            "strom: micro-batch %d failed; it is written again when the query restarts "
            "(%d record(s) from finished tasks will then appear twice)",
            batchId,
            total,
        )
