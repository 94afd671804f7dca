"""Copying a share group's dead letters (KIP-1191) to its dead-letter topic.

A share-partition's decision names the records it moved to ARCHIVING by REJECT or at the
delivery count limit (`DeadLetter`); once that is durable in `__share_group_state`, each
record is appended to partition (source partition mod the topic's partitions) of the
group's `errors.deadletterqueue.topic.name`, stamped with the time of the copy and
carrying KIP-1191's `__dlq.errors.*` headers. With the group's
`errors.deadletterqueue.copy.record.enable` it also carries the record's key, value and
headers; without (Kafka's default) only the headers.

The copy is appended here when this broker leads the destination partition, else sent
to its leader as a Produce (v12, the newest that names topics; acks=-1, so it is
committed as a local copy is waited for) over the inter-broker link, with one client
kept per leader. The batch is neither idempotent nor transactional (producer id -1).

    copy -> led here: append, wait until committed
         -> led elsewhere: Produce to the leader the image names
    NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
    REQUEST_TIMED_OUT, a lost connection -> again, after a pause, to the leader of then,
        for at most DELIVERY_BOUND_S
    anything else, or the bound spent -> logged and dropped

What differs from Kafka (docs/share-groups.md): the topic must already exist (it is not
created), and its `errors.deadletterqueue.group.enable` topic config is not asked for.

A copy that cannot be made is logged and given up: the share-partition then archives its
records anyway (ARCHIVING -> ARCHIVED), as Kafka does ("Failed to write to DLQ,
proceeding to ARCHIVED regardless"). A copy tried again after a timeout, or made again
after a crash between the copy and the write of ARCHIVED, may be written twice (the
Produce is not idempotent): dead letters are copied at least once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client import ClientError
from strom.client.security import ClientSecurity
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.batch_header import RecordsError, parse_batch_header
from strom.protocol.record_codec import Header, NewRecord, decode_batch, encode_batch
from strom.server.broker_clients import BrokerClients
from strom.server.clock import now_ms
from strom.server.partition import LeadershipMoved, Partition
from strom.server.partitions import PartitionManager
from strom.share.log_batches import batch_spans
from strom.share.values import (
    DLQ_HEADER_DELIVERY_COUNT,
    DLQ_HEADER_GROUP,
    DLQ_HEADER_MESSAGE,
    DLQ_HEADER_OFFSET,
    DLQ_HEADER_PARTITION,
    DLQ_HEADER_TOPIC,
    DeadLetter,
)

__all__ = [
    "DeadLetterCopier",
    "dead_letter_partition",
    "produce_answer",
    "produce_request",
    "retriable",
    "with_retries",
]

log = logging.getLogger(__name__)

_COMMIT_TIMEOUT_S = 5.0
_READ_BYTES = 1 << 20
PRODUCE_VERSION = 12
"""The newest Produce version whose requests name topics (v13 names topic ids)."""
DELIVERY_BOUND_S = 5.0
"""How long one copy is tried, over all its attempts, by default."""
RETRY_S = 0.2
"""Pause before a copy is tried again."""
_PRODUCE_TIMEOUT_MS = 4000

_RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    }
)


def dead_letter_partition(source_partition: int, partitions: int) -> int:
    """The dead-letter topic's partition a source partition's records are copied to."""
    return source_partition % partitions


def retriable(error: ErrorCode) -> bool:
    """Whether a copy that failed so is tried again (a lost connection counts as
    REQUEST_TIMED_OUT)."""
    return error in _RETRIABLE


class DeadLetterCopier:
    """Ports, read at each use: `image`, the committed metadata (leaders, where brokers
    listen, group configs); `partitions`, those held here; `security`, how connections
    to other brokers are secured (inter-broker)."""

    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        partitions: PartitionManager,
        security: Callable[[], ClientSecurity | None] = lambda: None,
        retry_s: float = RETRY_S,
        bound_s: Callable[[], float] = lambda: DELIVERY_BOUND_S,
    ) -> None:
        """`bound_s`: how long one copy is tried, over all its attempts, read at each copy
        (`strom.share.dead.letter.copy.timeout.ms`)."""
        self._node_id = node_id
        self._bound_s = bound_s
        self._label = f"[node {node_id}] "
        self._image = image
        self._partitions = partitions
        self._retry_s = retry_s
        self._clients = BrokerClients(f"strom-dead-letters-{node_id}", image, security)

    async def copy(self, source: Partition, letters: Sequence[DeadLetter]) -> None:
        """Append each letter's records to the dead-letter topic; wait until committed,
        or until the copy is given up (logged)."""
        for letter in letters:
            try:
                await self._copy_one(source, letter)
            except RecordsError as exc:
                log.warning("%sdead letters %s not copied: %r", self._label, letter, exc)

    def close(self) -> None:
        """Close the clients of other brokers (the broker stops)."""
        self._clients.close()

    async def _copy_one(self, source: Partition, letter: DeadLetter) -> None:
        image = self._image()
        topic = image.topics_by_name.get(letter.dead_letter_topic)
        if topic is None or not topic.partitions:
            log.warning(
                "%sdead-letter topic %s of share group %s does not exist: offsets %d-%d of "
                "%s-%d not copied",
                self._label,
                letter.dead_letter_topic,
                letter.group_id,
                letter.first_offset,
                letter.last_offset,
                letter.topic,
                letter.partition,
            )
            return
        index = dead_letter_partition(letter.partition, len(topic.partitions))
        copy_record = (
            image.group_configs(letter.group_id).get("errors.deadletterqueue.copy.record.enable")
            == "true"
        )
        originals = self._read(source, letter) if copy_record else {}
        records = []
        for offset in range(letter.first_offset, letter.last_offset + 1):
            key, value, headers = originals.get(offset, (None, None, ()))
            records.append(NewRecord(key, value, (*headers, *_dlq_headers(letter, offset))))
        batch = encode_batch(records, base_timestamp_ms=now_ms())
        error = await self._deliver(letter.dead_letter_topic, index, batch)
        if error is not ErrorCode.none:
            log.warning(
                "%sdead letters offsets %d-%d of %s-%d (share group %s) not copied to %s-%d: %s",
                self._label,
                letter.first_offset,
                letter.last_offset,
                letter.topic,
                letter.partition,
                letter.group_id,
                letter.dead_letter_topic,
                index,
                error.name,
            )

    async def _deliver(self, topic: str, index: int, batch: bytes) -> ErrorCode:
        """Write the batch to its partition, here or at its leader (see the module
        docstring); the last answer."""
        return await with_retries(
            lambda: self._attempt(topic, index, batch),
            retry_s=self._retry_s,
            bound_s=self._bound_s(),
        )

    async def _attempt(self, topic: str, index: int, batch: bytes) -> ErrorCode:
        local = self._partitions.get(topic, index)
        if local is not None and local.is_leader:
            view = memoryview(batch)
            current = now_ms()
            try:
                result = local.append([(view, parse_batch_header(view))], now_ms=current)
                await local.committed(result.last_offset + 1, _COMMIT_TIMEOUT_S)
            except LeadershipMoved:
                return ErrorCode.not_leader_or_follower
            except TimeoutError:
                return ErrorCode.request_timed_out
            return ErrorCode.none
        leader = _leader_of(self._image(), topic, index)
        if leader is None:
            return ErrorCode.unknown_topic_or_partition
        client = None if leader in (-1, self._node_id) else self._clients.get(leader)
        if client is None:
            return ErrorCode.leader_not_available
        try:
            response = await client.request(
                ApiKey.PRODUCE,
                produce_request(topic, index, batch),
                api_version=PRODUCE_VERSION,
                timeout_s=_PRODUCE_TIMEOUT_MS / 1000 + 1.0,
            )
        except (ClientError, OSError, TimeoutError) as exc:
            log.info("%sProduce of dead letters to broker %d: %s", self._label, leader, exc)
            return ErrorCode.request_timed_out
        return produce_answer(response, topic, index)

    def _read(
        self, source: Partition, letter: DeadLetter
    ) -> dict[int, tuple[bytes | None, bytes | None, tuple[Header, ...]]]:
        found: dict[int, tuple[bytes | None, bytes | None, tuple[Header, ...]]] = {}
        offset = max(letter.first_offset, source.log.log_start_offset)
        while offset <= letter.last_offset and offset < source.log.log_end_offset:
            read = source.log.read(offset, _READ_BYTES, min_one_batch=True)
            if not read.size_bytes:
                break
            data = read.read_bytes()
            view = memoryview(data)
            for pos, size in batch_spans(data):
                header, decoded = decode_batch(view[pos : pos + size])
                if header.is_control:
                    continue
                for record in decoded:
                    if letter.first_offset <= record.offset <= letter.last_offset:
                        found[record.offset] = (record.key, record.value, record.headers)
            offset = max(read.next_offset, offset + 1)
        return found


def _dlq_headers(letter: DeadLetter, offset: int) -> tuple[Header, ...]:
    return (
        (DLQ_HEADER_TOPIC, letter.topic.encode()),
        (DLQ_HEADER_PARTITION, str(letter.partition).encode()),
        (DLQ_HEADER_OFFSET, str(offset).encode()),
        (DLQ_HEADER_GROUP, letter.group_id.encode()),
        (DLQ_HEADER_DELIVERY_COUNT, str(letter.delivery_count).encode()),
        (DLQ_HEADER_MESSAGE, letter.reason.value.encode()),
    )


async def with_retries(
    attempt: Callable[[], Awaitable[ErrorCode]], *, retry_s: float, bound_s: float
) -> ErrorCode:
    """`attempt()` until it answers an error that is not retriable, pausing `retry_s`
    between attempts, for at most `bound_s`; the last answer (REQUEST_TIMED_OUT if the
    bound cut the first one short)."""
    error = ErrorCode.request_timed_out
    try:
        async with asyncio.timeout(bound_s):
            while True:
                error = await attempt()
                if not retriable(error):
                    return error
                await asyncio.sleep(retry_s)
    except TimeoutError:
        return error


def _leader_of(image: MetadataImage, topic: str, index: int) -> int | None:
    """The partition's leader (-1 while it has none); None when the image has no such
    partition."""
    found = image.topics_by_name.get(topic)
    partition = None if found is None else found.partitions.get(index)
    if partition is None:
        return None
    broker = image.brokers.get(partition.leader)
    return -1 if broker is None or broker.fenced else partition.leader


def produce_request(topic: str, index: int, batch: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": _PRODUCE_TIMEOUT_MS,
        "topic_data": [{"name": topic, "partition_data": [{"index": index, "records": batch}]}],
    }


def produce_answer(response: Any, topic: str, index: int) -> ErrorCode:
    """The partition's error code; REQUEST_TIMED_OUT if the response left it out."""
    for answer in response.responses:
        if str(answer.name) != topic:
            continue
        for partition in answer.partition_responses:
            if int(partition.index) == index:
                return ErrorCode(partition.error_code)
    return ErrorCode.request_timed_out
