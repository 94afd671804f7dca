"""Copying a share group's dead letters (KIP-1191) to its dead-letter topic.

A share-partition's decision names the records it archived by REJECT or at the delivery
count limit (`DeadLetter`); once the decision is durable in `__share_group_state`, each
record is appended to partition (source partition mod the topic's partitions) of the
group's `errors.deadletterqueue.topic.name`, stamped with the time of the copy and
carrying KIP-1191's `__dlq.errors.*` headers. With the group's
`errors.deadletterqueue.copy.record.enable` it also carries the record's key, value and
headers; without (Kafka's default) only the headers.

What differs from Kafka (docs/share-groups.md): the copy is made only when this broker
leads the destination partition, the topic must already exist (it is not created), and
its `errors.deadletterqueue.group.enable` topic config is not asked for. A copy that
cannot be made is logged and dropped: the state write before it already archived the
records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from strom.metadata.image import MetadataImage
from strom.protocol.batch_header import RecordsError, parse_batch_header
from strom.protocol.record_codec import Header, NewRecord, decode_batch, encode_batch
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

__all__ = ["DeadLetterCopier"]

log = logging.getLogger(__name__)

_COMMIT_TIMEOUT_S = 5.0
_READ_BYTES = 1 << 20


class DeadLetterCopier:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        partitions: PartitionManager,
    ) -> None:
        self._label = f"[node {node_id}] "
        self._image = image
        self._partitions = partitions

    async def copy(self, source: Partition, letters: Sequence[DeadLetter]) -> None:
        """Append each letter's records to the dead-letter topic; wait until committed."""
        for letter in letters:
            try:
                await self._copy_one(source, letter)
            except (LeadershipMoved, RecordsError, TimeoutError) as exc:
                log.warning("%sdead letters %s not copied: %r", self._label, letter, exc)

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
        index = letter.partition % len(topic.partitions)
        target = self._partitions.get(letter.dead_letter_topic, index)
        if target is None or not target.is_leader:
            log.warning(
                "%sdead-letter partition %s-%d is not led here: offsets %d-%d not copied",
                self._label,
                letter.dead_letter_topic,
                index,
                letter.first_offset,
                letter.last_offset,
            )
            return
        copy_record = (
            image.group_configs(letter.group_id).get("errors.deadletterqueue.copy.record.enable")
            == "true"
        )
        originals = self._read(source, letter) if copy_record else {}
        records = []
        for offset in range(letter.first_offset, letter.last_offset + 1):
            key, value, headers = originals.get(offset, (None, None, ()))
            records.append(NewRecord(key, value, (*headers, *_dlq_headers(letter, offset))))
        current = now_ms()
        batch = encode_batch(records, base_timestamp_ms=current)
        view = memoryview(batch)
        result = target.append([(view, parse_batch_header(view))], now_ms=current)
        await target.committed(result.last_offset + 1, _COMMIT_TIMEOUT_S)

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
