"""The batch reader: a read task fetches its range itself and decodes whole record batches.

Each task runs a private event loop with strom's own Kafka client: it asks a bootstrap
broker (Metadata) which broker leads its partition, then sends that leader Fetch
requests (sessionless, at the query's isolation level) from the range's start until
its end, and hands every answer to `RangeColumns` (fetched.py), which decodes record
batches into Arrow columns without a Python object per record. It works against any
Kafka broker: Fetch up to v12, Metadata and ListOffsets as Kafka 4 serves them.

Errors as the consumer reader treats them: a moved leader or a lost connection is looked
up again and retried; an offset retention removed (OFFSET_OUT_OF_RANGE) is data loss
from the log start on; a log that ends before the range does (truncated since the range
was planned) is data loss from its end; no progress for kafkaConsumer.pollTimeoutMs
fails the task; any other error code fails it with the error's name.

The connections are secured as the query's kafka.security.protocol, kafka.ssl.* and
kafka.sasl.* options say (strom.client.settings: TLS, SASL/PLAIN and SCRAM).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from kio.schema.errors import ErrorCode

from strom.client import ClientError, NodeClient
from strom.client.settings import security_from_settings
from strom.config import ConfigError
from strom.config.listeners import parse_host_port
from strom.protocol.apis import ApiKey
from strom.spark.errors import BrokerError, OptionError
from strom.spark.fetched import RangeColumns
from strom.spark.kafka import REQUEST_TIMEOUT_S, ROWS_PER_ARROW_BATCH, report
from strom.spark.offsets import IsolationLevel, OffsetRange, clamp_range
from strom.spark.options import ReadOptions

log = logging.getLogger(__name__)

FETCH_MAX_VERSION = 12  # v13 on names topics by id; names keep one request for any broker
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7
FETCH_WAIT_MS = 500
DEFAULT_PARTITION_BYTES = 8 * 1024 * 1024
MAX_PARTITION_BYTES = 64 * 1024 * 1024
CLIENT_ID = "strom-spark"
EARLIEST, LATEST = -2, -1
# Errors after which the leader is looked up again and the fetch retried.
RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.request_timed_out,
        ErrorCode.offset_not_available,
        ErrorCode.network_exception,
    }
)


def read_range_batches(rng: OffsetRange, options: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches, fetched by this task itself."""
    loop = asyncio.new_event_loop()
    task = _RangeFetch(rng, options)
    try:
        while True:
            batch = loop.run_until_complete(task.next_batch())
            if batch is None:
                return
            if batch.num_rows:
                yield batch
    finally:
        loop.run_until_complete(task.close())
        loop.close()


class _Retry(Exception):
    """The leader could not be reached or found now; look it up again after a pause."""


class _RangeFetch:
    """Finding the leader -> fetching -> done; a retriable failure finds it again."""

    def __init__(self, rng: OffsetRange, options: ReadOptions) -> None:
        self._options = options
        self._columns = RangeColumns(
            rng,
            include_headers=options.include_headers,
            read_committed=options.isolation_level is IsolationLevel.READ_COMMITTED,
        )
        self._bootstrap = _addresses(options.bootstrap_servers)
        self._clients: dict[tuple[str, int], NodeClient] = {}
        self._leader: NodeClient | None = None
        config = options.client_config
        self._partition_bytes = min(
            _positive(config, "max.partition.fetch.bytes") or DEFAULT_PARTITION_BYTES,
            MAX_PARTITION_BYTES,
        )
        self._client_id = config.get("client.id", CLIENT_ID)
        try:
            self._security = security_from_settings(config)
        except ValueError as exc:
            key = getattr(exc, "key", "security.protocol")  # OAUTHBEARER's name theirs
            raise OptionError(f"kafka.{key}", str(exc)) from None
        self._progress_at = time.monotonic()

    async def next_batch(self) -> pa.RecordBatch | None:
        """The next Arrow batch of the range; None once the range is read."""
        columns = self._columns
        while not columns.done and columns.rows < ROWS_PER_ARROW_BATCH:
            if await self._fetch_once():
                self._progress_at = time.monotonic()
            elif time.monotonic() - self._progress_at > self._options.poll_timeout_ms / 1000:
                tp = columns.range.topic_partition
                raise BrokerError(
                    f"strom: no records from {tp} at offset {columns.position} for "
                    f"{self._options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)"
                )
        return columns.build() if columns.rows else None

    async def close(self) -> None:
        for client in self._clients.values():
            client.close()
        for client in self._clients.values():
            await client.wait_closed()

    async def _fetch_once(self) -> bool:
        """One Fetch; True if the range moved on."""
        try:
            leader = await self._leader_client()
            answer = await self._fetch(leader)
        except (_Retry, ClientError) as exc:
            log.debug("strom: %s: %s; looking up its leader again", self._range, exc)
            await self._pause()
            return False
        error = ErrorCode(answer.error_code)
        if error == ErrorCode.none:
            return self._took(answer)
        if error == ErrorCode.offset_out_of_range:
            earliest = await self._offset(leader, EARLIEST)
            latest = await self._offset(leader, LATEST)
            self._clamp(earliest, latest)
            return True
        if error in RETRIABLE:
            log.debug("strom: %s: %s; looking up its leader again", self._range, error.name)
            await self._pause()
            return False
        raise BrokerError(f"strom: reading {self._range.topic_partition} failed: {error.name}")

    @property
    def _range(self) -> OffsetRange:
        return self._columns.range

    def _took(self, answer: Any) -> bool:
        columns = self._columns
        before = columns.position
        records = answer.records or b""
        aborted = [
            (int(txn.producer_id), int(txn.first_offset))
            for txn in (answer.aborted_transactions or ())
        ]
        if columns.take(records, aborted):
            return columns.position > before or columns.done
        if records:  # a batch larger than the limit: ask for more next time
            if self._partition_bytes >= MAX_PARTITION_BYTES:
                raise BrokerError(
                    f"strom: {self._range.topic_partition}: a record batch at offset "
                    f"{before} is larger than {MAX_PARTITION_BYTES} bytes"
                )
            self._partition_bytes = min(self._partition_bytes * 2, MAX_PARTITION_BYTES)
            return True
        committed = columns.read_committed
        end = int(answer.last_stable_offset if committed else answer.high_watermark)
        if 0 <= end <= columns.position:  # the log ends before the range does
            self._clamp(int(answer.log_start_offset), end)
            return True
        return False

    def _clamp(self, earliest: int, latest: int) -> None:
        columns = self._columns
        rest = OffsetRange(self._range.topic_partition, columns.position, self._range.until)
        clamped, losses = clamp_range(rest, earliest, latest)
        report(losses, self._options.fail_on_data_loss)
        columns.skip_to(clamped.start)
        columns.end_at(clamped.until)

    async def _pause(self) -> None:
        self._leader = None
        await asyncio.sleep(self._options.fetch_retry_interval_ms / 1000)

    async def _fetch(self, leader: NodeClient) -> Any:
        tp = self._range.topic_partition
        response = await leader.request(
            ApiKey.FETCH,
            {
                "replica_id": -1,
                "max_wait": FETCH_WAIT_MS,
                "min_bytes": 1,
                "max_bytes": MAX_PARTITION_BYTES,
                "isolation_level": int(self._columns.read_committed),
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": tp.topic,
                        "topic_id": None,
                        "partitions": [
                            {
                                "partition": tp.partition,
                                "current_leader_epoch": -1,
                                "fetch_offset": self._columns.position,
                                "last_fetched_epoch": -1,
                                "log_start_offset": -1,
                                "partition_max_bytes": self._partition_bytes,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
            max_version=FETCH_MAX_VERSION,
            timeout_s=REQUEST_TIMEOUT_S + FETCH_WAIT_MS / 1000,
        )
        if response.error_code != ErrorCode.none:
            raise _Retry(f"Fetch answered {ErrorCode(response.error_code).name}")
        for topic in response.responses:
            for partition in topic.partitions:
                if topic.topic == tp.topic and partition.partition_index == tp.partition:
                    return partition
        raise _Retry("Fetch answered without the partition")

    async def _offset(self, leader: NodeClient, timestamp: int) -> int:
        tp = self._range.topic_partition
        response = await leader.request(
            ApiKey.LIST_OFFSETS,
            {
                "replica_id": -1,
                "isolation_level": int(self._columns.read_committed),
                "topics": [
                    {
                        "name": tp.topic,
                        "partitions": [
                            {
                                "partition_index": tp.partition,
                                "current_leader_epoch": -1,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
            },
            api_version=LIST_OFFSETS_VERSION,
            timeout_s=REQUEST_TIMEOUT_S,
        )
        answer = response.topics[0].partitions[0]
        if answer.error_code != ErrorCode.none:
            raise BrokerError(
                f"strom: {tp}: ListOffsets answered {ErrorCode(answer.error_code).name}"
            )
        return int(answer.offset)

    async def _leader_client(self) -> NodeClient:
        if self._leader is None:
            self._leader = self._client(*await self._find_leader())
        return self._leader

    async def _find_leader(self) -> tuple[str, int]:
        """The leader's address, as the first bootstrap broker that answers sees it."""
        tp = self._range.topic_partition
        reason = "no bootstrap broker answered"
        for address in self._bootstrap:
            try:
                response = await self._client(*address).request(
                    ApiKey.METADATA,
                    {
                        "topics": [{"name": tp.topic, "topic_id": None}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False,
                    },
                    api_version=METADATA_VERSION,
                    timeout_s=REQUEST_TIMEOUT_S,
                )
            except ClientError as exc:
                reason = str(exc)
                continue
            brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
            for topic in response.topics:
                if topic.name != tp.topic:
                    continue
                if topic.error_code != ErrorCode.none:
                    raise _Retry(f"Metadata answered {ErrorCode(topic.error_code).name}")
                for partition in topic.partitions:
                    if int(partition.partition_index) == tp.partition:
                        leader = brokers.get(int(partition.leader_id))
                        if leader is None:
                            raise _Retry("the partition has no leader now")
                        return leader
            raise _Retry("Metadata does not list the partition")
        raise _Retry(reason)

    def _client(self, host: str, port: int) -> NodeClient:
        client = self._clients.get((host, port))
        if client is None:
            client = NodeClient(
                host,
                port,
                client_id=self._client_id,
                connect_timeout_s=REQUEST_TIMEOUT_S,
                security=self._security,
            )
            self._clients[(host, port)] = client
        return client


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for item in bootstrap.split(","):
        if item.strip():
            try:
                addresses.append(parse_host_port(item, key="kafka.bootstrap.servers"))
            except ConfigError as exc:
                raise OptionError("kafka.bootstrap.servers", str(exc)) from None
    return addresses


def _positive(config: Mapping[str, str], key: str) -> int | None:
    """A client setting's number, None if absent or not a positive integer (librdkafka
    has judged the kafka.* options on the driver already)."""
    try:
        value = int(config.get(key, ""))
    except ValueError:
        return None
    return value if value > 0 else None
