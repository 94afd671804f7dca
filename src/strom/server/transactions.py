"""The transaction coordinator's shell: the pure core (txn/coordinator.py) on the event
loop, its storage in `__transaction_state`, its markers and its timers.

    created -> follow(image) (load each partition of __transaction_state this broker
            leads; drop the ids of one it no longer leads) -> serving
            -> close() (writes and markers under way abandoned) -> closed

The coordinator of a transactional id is the leader of partition `partition_for(id)` of
`__transaction_state` (txn/placement.py), created on first use, compacted, with
`transaction.state.log.num.partitions` partitions. Its coordinator epoch is that
partition's leader epoch when this broker loaded it; the markers carry it.

Loading replays the partition's records into the core; prepared transactions get their
markers written again (`core.loaded`). An id whose partition is led here but not loaded
gets COORDINATOR_LOAD_IN_PROGRESS; one led elsewhere NOT_COORDINATOR.

Every record the core asks for (`TxnResult.write`) is appended to the id's partition
and waited on until committed (acks=all: `transaction.state.log.min.isr` applies); the
core then hears `durable(write_id)`, or `failed(write_id, error)` with the error mapped
as Kafka's TransactionStateManager.appendTransactionToLog maps it. A durable PrepareCommit or
PrepareAbort starts its markers (server/txn_markers.py); once every partition has its
marker, the CompleteCommit or CompleteAbort record is written (again after a pause if
that fails, while this broker still coordinates the id). EndTxn waits for the markers (at
most `END_TXN_COMPLETION_WAIT_S`), so that what it committed is readable when the client
hears so, but not for the completion record: the producer's next request for the id
(AddPartitionsToTxn, most often) waits for that instead, for as long, rather than being
told CONCURRENT_TRANSACTIONS and backing off. A producer with a transaction of many
records sends that request with its first record, so the completion is written while it
is still producing the rest.

Producer ids come from the broker's blocks (server/producer_ids.py): the core asks for
one synchronously, so the shell keeps one spare, fetched when a decision needs it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.metadata import controller
from strom.metadata.image import MetadataImage
from strom.protocol.records import (
    RecordsError,
    encode_batch,
    parse_batch_header,
)
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.log_replay import replay_batches
from strom.server.partition import LeadershipMoved
from strom.server.producer_ids import ProducerIdsUnavailable
from strom.server.txn_ports import (
    CreateTopics,
    MarkerWriter,
    ProducerIdSource,
    TxnStatePartitions,
    transaction_state_configs,
)
from strom.txn.coordinator import MarkerJob, TxnConfig, TxnCoordinator, TxnResult, TxnWrite
from strom.txn.metadata import TxnEntry
from strom.txn.placement import TRANSACTION_STATE_TOPIC, partition_for
from strom.txn.records import TxnRecordError, decode_key, decode_value, encode_key, encode_value

if TYPE_CHECKING:
    from strom.server.partition import Partition

log = logging.getLogger(__name__)

TOMBSTONE_TIMEOUT_S = 30.0
"""How long a tombstone waits to be committed (Kafka: request.timeout.ms); a record
waits as long as its transaction's timeout, as in Kafka."""
RETRY_S = 0.5
"""Pause before a failed CompleteCommit/CompleteAbort record is written again."""
END_TXN_COMPLETION_WAIT_S = 1.0
"""How long EndTxn waits for the markers once the end is durable (Kafka answers at once:
its committed records are then not readable yet), and how long a request for an id
waits for the completion of its last transaction (Kafka answers CONCURRENT_TRANSACTIONS,
and the client backs off 20 ms or more). Slower than this, the answers go out."""
TRANSACTION_VERSION = 2
"""The finalized `transaction.version` of a strom cluster (what ApiVersions advertises):
the coordinator's own aborts (timeouts, fences) follow it."""
LOG_VALUE_VERSION = 1 if TRANSACTION_VERSION >= 1 else 0
"""The value layout written: version 1 at transaction versions 1 and 2 (txn/records.py)."""

# What the client sees when a record cannot be written: Kafka's mapping
# (TransactionStateManager.appendTransactionToLog); errors not listed pass through.
_COORDINATOR_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


class TxnUnavailable(Exception):
    """This broker cannot coordinate the id now: `error_code` is NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class _NoSpareId(Exception):
    """The core asked for a producer id and the shell has none at hand."""


@dataclass(frozen=True, slots=True)
class _Completion:
    """The markers and completion record of one transaction, being written."""

    task: asyncio.Task[None]
    marked: asyncio.Future[None]
    """Done once every marker is written (or the task gave up)."""


class TxnService:
    """Owns the TxnCoordinator core for this broker.

    Ports, each read when it is used: `config`, the broker's config now (the core's
    settings are read once, at construction); `image`, the committed metadata image;
    `partitions`, where `__transaction_state` is read and written; `create_topics`, how
    it is created; `producer_ids`, the broker's producer id blocks; `markers`, how a
    transaction's markers are written."""

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        image: Callable[[], MetadataImage],
        partitions: TxnStatePartitions,
        create_topics: CreateTopics,
        producer_ids: ProducerIdSource,
        markers: MarkerWriter,
    ) -> None:
        self._node_id = node_id
        self._config = config
        self._image = image
        self._partitions = partitions
        self._create_topics = create_topics
        self._producer_ids = producer_ids
        self._markers = markers
        config_now = config()
        self.core = TxnCoordinator(
            TxnConfig(
                max_timeout_ms=config_now.transaction_max_timeout_ms,
                id_expiration_ms=config_now.transactional_id_expiration_ms,
                transaction_version=TRANSACTION_VERSION,
            )
        )
        self._loaded: dict[int, int] = {}
        """Partition index -> the coordinator epoch it was loaded at."""
        self._spare_id: int | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._completing: dict[str, _Completion] = {}
        """Transactional id -> the task writing its markers and completion record."""
        self._creating: asyncio.Task[None] | None = None
        self._closed = False

    # --- loading ----------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        topic = self._image().topics_by_name.get(TRANSACTION_STATE_TOPIC)
        if topic is not None:
            return len(topic.partitions)
        return self._config().transaction_state_log_num_partitions

    def leader_of(self, index: int) -> int:
        topic = self._image().topics_by_name.get(TRANSACTION_STATE_TOPIC)
        partition = topic.partitions.get(index) if topic is not None else None
        return -1 if partition is None else partition.leader

    def coordinator_epoch(self, index: int) -> int | None:
        """The epoch this broker coordinates partition `index` at; None if it does not."""
        return self._loaded.get(index)

    def follow(self, image: MetadataImage) -> None:
        """Coordinate the ids of the `__transaction_state` partitions this broker leads:
        load a partition when it becomes the leader (again, at a new leader epoch),
        forget its ids when it stops."""
        topic = image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        leading: dict[int, int] = {}
        if topic is not None and not self._closed:
            leading = {
                index: partition.leader_epoch
                for index, partition in topic.partitions.items()
                if partition.leader == self._node_id
            }
        for index, epoch in sorted(self._loaded.items()):
            if leading.get(index) != epoch:
                self._unload(index)
        current = now_ms()
        for index, epoch in sorted(leading.items()):
            if index in self._loaded:
                continue
            partition = self._partitions.get(TRANSACTION_STATE_TOPIC, index)
            if partition is None:
                continue
            self._load(index, epoch, partition, current)

    def _load(self, index: int, epoch: int, partition: Partition, current_ms: int) -> None:
        count = self._replay(partition)
        self._loaded[index] = epoch
        jobs = self.core.loaded(current_ms)
        log.info(
            "[node %d] coordinating the transactional ids of %s-%d at coordinator epoch %d "
            "(%d record(s) loaded, %d transaction(s) to complete)",
            self._node_id,
            TRANSACTION_STATE_TOPIC,
            index,
            epoch,
            count,
            len(jobs),
        )
        for job in jobs:
            self._start_completion(job, index, epoch)

    def _replay(self, partition: Partition) -> int:
        count = 0
        for _, records in replay_batches(partition):
            for record in records:
                count += self._replay_record(record.key, record.value)
        return count

    def _replay_record(self, key: bytes | None, value: bytes | None) -> int:
        if key is None:
            return 0
        try:
            txn_id = decode_key(key)
            self.core.load(txn_id, None if value is None else decode_value(value))
        except TxnRecordError as exc:
            log.warning("skipping a record of %s: %s", TRANSACTION_STATE_TOPIC, exc)
            return 0
        return 1

    def _unload(self, index: int) -> None:
        del self._loaded[index]
        count = self.num_partitions
        mine = [t for t in self.core.entries if partition_for(t, count) == index]
        self.core.forget(mine)
        log.info(
            "[node %d] no longer coordinating the transactional ids of %s-%d",
            self._node_id,
            TRANSACTION_STATE_TOPIC,
            index,
        )

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` if it does not exist yet (once, whoever asks);
        TxnUnavailable(COORDINATOR_NOT_AVAILABLE) when it cannot be created now."""
        if TRANSACTION_STATE_TOPIC in self._image().topics_by_name:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create_topic())
            self._creating.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self._config()
        live = sum(1 for b in self._image().brokers.values() if not b.fenced)
        replication = max(1, min(config.transaction_state_log_replication_factor, live))
        topic = controller.NewTopic(
            TRANSACTION_STATE_TOPIC,
            config.transaction_state_log_num_partitions,
            replication,
            configs=transaction_state_configs(config, replication),
        )
        results = await self._create_topics([topic])
        if results[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.error(
                "[node %d] cannot create %s: %s",
                self._node_id,
                TRANSACTION_STATE_TOPIC,
                results[0].error_message,
            )
            raise TxnUnavailable(
                ErrorCode.coordinator_not_available,
                f"cannot create {TRANSACTION_STATE_TOPIC}: {results[0].error_message}",
            )

    def _check(self, txn_id: str) -> int:
        """The id's partition, if this broker coordinates the id now; else TxnUnavailable."""
        if self._closed:
            raise TxnUnavailable(ErrorCode.not_coordinator, "broker is stopping")
        index = partition_for(txn_id, self.num_partitions)
        if self.leader_of(index) != self._node_id:
            raise TxnUnavailable(
                ErrorCode.not_coordinator,
                f"this broker does not lead {TRANSACTION_STATE_TOPIC}-{index}",
            )
        if index not in self._loaded:
            raise TxnUnavailable(
                ErrorCode.coordinator_load_in_progress,
                f"{TRANSACTION_STATE_TOPIC}-{index} is loading",
            )
        return index

    # --- what the handlers ask -------------------------------------------------------

    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> TxnResult:
        """InitProducerId with a transactional id; `expected` is the (producer id,
        epoch) of a producer recovering from an error (v3+)."""
        result = await self._decide(
            txn_id,
            lambda allocate: self.core.init_producer_id(
                txn_id, timeout_ms, expected, now_ms(), allocate
            ),
        )
        said = {
            ErrorCode.none: f"producer id {result.producer_id}, epoch {result.producer_epoch}",
            ErrorCode.concurrent_transactions: "its open transaction is aborted first",
        }.get(result.error)
        if said is not None:
            log.info("[node %d] InitProducerId for %r: %s", self._node_id, txn_id, said)
        return result

    async def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        *,
        transaction_version: int,
    ) -> TxnResult:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's partition)."""
        return await self._decide(
            txn_id,
            lambda _allocate: self.core.add_partitions(
                txn_id,
                producer_id,
                epoch,
                partitions,
                now_ms(),
                transaction_version=transaction_version,
            ),
        )

    async def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> TxnResult:
        """AddPartitionsToTxn's verify-only form (KIP-890): nothing is written."""
        self._check(txn_id)
        return self.core.verify_partitions(txn_id, producer_id, epoch, partitions)

    async def end_txn(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        *,
        transaction_version: int,
    ) -> TxnResult:
        """EndTxn, answered once the PrepareCommit or PrepareAbort is durable and its
        markers are written, or `END_TXN_COMPLETION_WAIT_S` later if they are slow (they
        then follow in the background)."""
        result = await self._decide(
            txn_id,
            lambda allocate: self.core.end_txn(
                txn_id,
                producer_id,
                epoch,
                commit,
                now_ms(),
                allocate,
                transaction_version=transaction_version,
            ),
        )
        completing = self._completing.get(txn_id)
        if result.error is ErrorCode.none and completing is not None:
            await asyncio.wait({completing.marked}, timeout=END_TXN_COMPLETION_WAIT_S)
        if result.error in (ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
            end = "commit" if commit else "abort"
            log.info(
                "[node %d] EndTxn %s for %r: epoch %d is fenced", self._node_id, end, txn_id, epoch
            )
        return result

    def entry(self, txn_id: str) -> TxnEntry | None:
        """The id's committed state (DescribeTransactions); None if there is none.
        Raises TxnUnavailable."""
        self._check(txn_id)
        entry = self.core.entries.get(txn_id)
        return entry if entry is not None and entry.durable else None

    def entries(self) -> list[TxnEntry]:
        """Every id coordinated here with a durable state (ListTransactions)."""
        return [entry for entry in self.core.entries.values() if entry.durable]

    # --- decisions and writes --------------------------------------------------------

    async def _decide(
        self, txn_id: str, decide: Callable[[Callable[[], int]], TxnResult]
    ) -> TxnResult:
        """Run one decision of the core on an id this broker coordinates, fetching a
        producer id first if it needs one (the core asks before it changes anything),
        and answer once its record is durable. A transaction of the id still completing
        is waited for first (at most `END_TXN_COMPLETION_WAIT_S`)."""
        await self.ensure_topic()
        completing = self._completing.get(txn_id)
        if completing is not None:
            await asyncio.wait({completing.task}, timeout=END_TXN_COMPLETION_WAIT_S)
        while True:
            index = self._check(txn_id)
            try:
                result = decide(self._allocate)
            except _NoSpareId:
                try:
                    self._spare_id = await self._producer_ids.next_id()
                except ProducerIdsUnavailable as exc:
                    raise TxnUnavailable(ErrorCode.coordinator_load_in_progress, str(exc)) from exc
                continue
            if result.write is None:
                return result
            write = self._spawn(self._carry_out(result.write, index))
            try:
                answer = await asyncio.shield(write)
            except asyncio.CancelledError:  # the write abandoned, or this request cancelled
                if not write.cancelled():
                    raise
                answer = None
            return TxnResult(ErrorCode.not_coordinator) if answer is None else answer

    def _allocate(self) -> int:
        if self._spare_id is None:
            raise _NoSpareId
        producer_id, self._spare_id = self._spare_id, None
        return producer_id

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failure = task.exception()
            log.error("[node %d] transaction task failed", self._node_id, exc_info=failure)

    async def _carry_out(self, write: TxnWrite, index: int) -> TxnResult | None:
        """Write the record and tell the core how it went, whoever still waits; start
        the markers of a durable PrepareCommit or PrepareAbort. The request's answer
        (None when the id is no longer coordinated here)."""
        try:
            error = await self._append(write, index)
        except asyncio.CancelledError:  # abandoned: the core forgets it, the cancel goes on
            self.core.failed(write.write_id, ErrorCode.not_coordinator)
            raise
        if error is ErrorCode.none:
            result = self.core.durable(write.write_id, now_ms())
        else:
            result = self.core.failed(write.write_id, error)
        if result is not None and result.markers is not None:
            epoch = self._loaded.get(index)
            if epoch is not None:
                self._start_completion(result.markers, index, epoch)
        return result

    def _start_completion(self, job: MarkerJob, index: int, epoch: int) -> None:
        marked = asyncio.get_running_loop().create_future()
        task = self._spawn(self._complete(job, index, epoch, marked))
        completion = _Completion(task, marked)
        self._completing[job.txn_id] = completion
        task.add_done_callback(lambda _: self._forget_completion(job.txn_id, completion))

    def _forget_completion(self, txn_id: str, completion: _Completion) -> None:
        if not completion.marked.done():
            completion.marked.set_result(None)  # given up: EndTxn waits no more
        if self._completing.get(txn_id) is completion:
            del self._completing[txn_id]

    async def _append(self, write: TxnWrite, index: int) -> ErrorCode:
        """Append the record to partition `index` and wait until it is committed; a
        failure becomes the error Kafka's coordinator gives (`_COORDINATOR_ERRORS`)."""
        try:
            partition = self._partitions.get(TRANSACTION_STATE_TOPIC, index)
            if partition is None:
                raise PartitionGone(TRANSACTION_STATE_TOPIC, index)
            current = now_ms()
            value = write.value
            batch = encode_batch(
                [
                    (
                        encode_key(write.txn_id),
                        None if value is None else encode_value(value, version=LOG_VALUE_VERSION),
                        (),
                    )
                ],
                base_timestamp_ms=current,
            )
            view = memoryview(batch)
            result = partition.append(
                [(view, parse_batch_header(view))], now_ms=current, acks=-1, producer_check=False
            )
            timeout_s = TOMBSTONE_TIMEOUT_S if value is None else value.timeout_ms / 1000
            await partition.committed(result.last_offset + 1, timeout_s)
            return ErrorCode.none
        except RecordsError as exc:
            error, why = exc.error_code, str(exc)
        except LeadershipMoved as exc:
            error, why = ErrorCode.not_leader_or_follower, str(exc)
        except TimeoutError:
            error, why = ErrorCode.request_timed_out, "not committed in time"
        except PartitionGone as exc:
            error, why = ErrorCode.unknown_topic_or_partition, str(exc)
        except (TxnRecordError, ValueError) as exc:
            error, why = ErrorCode.message_too_large, str(exc)
        except OSError as exc:
            error, why = ErrorCode.kafka_storage_error, str(exc)
        log.info(
            "[node %d] cannot write the state of %r to %s-%d: %s (%s)",
            self._node_id,
            write.txn_id,
            TRANSACTION_STATE_TOPIC,
            index,
            error.name,
            why,
        )
        return _COORDINATOR_ERRORS.get(error, error)

    # --- markers and completion ------------------------------------------------------

    async def _complete(
        self, job: MarkerJob, index: int, epoch: int, marked: asyncio.Future[None]
    ) -> None:
        """Write the job's markers (then resolve `marked`), then its CompleteCommit or
        CompleteAbort record, while this broker coordinates partition `index` at `epoch`."""

        def current() -> bool:
            return not self._closed and self._loaded.get(index) == epoch

        if not await self._markers.write(job, epoch, current):
            return
        if not marked.done():
            marked.set_result(None)
        while current():
            write = self.core.markers_written(job.txn_id)
            if write is None:
                return
            result = await self._carry_out(write, index)
            if result is None or result.error is ErrorCode.none:
                return
            await asyncio.sleep(RETRY_S)

    # --- timers -----------------------------------------------------------------------

    async def run_timers(self) -> None:
        """Both timers below, until cancelled."""
        await asyncio.gather(self.run_timeouts(), self.run_expiry())

    async def run_timeouts(self) -> None:
        """Abort transactions open longer than their timeout, every
        `transaction.abort.timed.out.transaction.cleanup.interval.ms`."""
        while True:
            config = self._config()
            await asyncio.sleep(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
            )
            self._timer_writes(self.core.abort_timed_out(now_ms()))

    async def run_expiry(self) -> None:
        """Remove ids idle longer than `transactional.id.expiration.ms`, every
        `transaction.remove.expired.transaction.cleanup.interval.ms`."""
        while True:
            config = self._config()
            await asyncio.sleep(
                config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000
            )
            self._timer_writes(self.core.expire_ids(now_ms()))

    def _timer_writes(self, results: list[TxnResult]) -> None:
        count = self.num_partitions
        for result in results:
            if result.write is not None:
                index = partition_for(result.write.txn_id, count)
                self._spawn(self._carry_out(result.write, index))

    def close(self) -> None:
        """Stop: abandon every write and marker (the next coordinator finishes them)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        self._markers.close()
