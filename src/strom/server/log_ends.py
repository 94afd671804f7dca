"""A partition's log end as a consumer sees it (the high watermark, ListOffsets LATEST),
wherever it is led: read here when this broker leads it, else asked of its leader with
ListOffsets over the inter-broker link (as Kafka's PartitionMetadataClient asks). For
DescribeShareGroupOffsets' lag."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from strom.client import ClientError, NodeClient
from strom.client.security import ClientSecurity
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.server.partitions import PartitionManager

__all__ = ["LogEnds"]

log = logging.getLogger(__name__)

_LATEST = -1
_TIMEOUT_S = 10.0


class LogEnds:
    def __init__(
        self,
        node_id: int,
        image: Callable[[], MetadataImage],
        partitions: PartitionManager,
        security: Callable[[], ClientSecurity | None],
    ) -> None:
        self._node_id = node_id
        self._image = image
        self._partitions = partitions
        self._security = security

    async def __call__(self, topic: str, partition: int) -> tuple[ErrorCode, int]:
        local = self._partitions.get(topic, partition)
        if local is not None and local.is_leader:
            return ErrorCode.none, local.high_watermark
        image = self._image()
        found = image.topics_by_name.get(topic)
        meta = None if found is None else found.partitions.get(partition)
        if meta is None:
            return ErrorCode.unknown_topic_or_partition, -1
        leader = image.brokers.get(meta.leader)
        if leader is None or leader.fenced:
            return ErrorCode.leader_not_available, -1
        client = NodeClient(
            leader.host,
            leader.port,
            client_id=f"strom-log-ends-{self._node_id}",
            node_id=leader.broker_id,
            security=self._security(),
        )
        try:
            response = await client.request(
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": partition,
                                    "current_leader_epoch": -1,
                                    "timestamp": _LATEST,
                                }
                            ],
                        }
                    ],
                },
                api_version=7,
                timeout_s=_TIMEOUT_S,
            )
        except (ClientError, OSError, TimeoutError) as exc:
            log.warning("broker %d: log end of %s-%d: %s", self._node_id, topic, partition, exc)
            return ErrorCode.leader_not_available, -1
        finally:
            client.close()
        answer = response.topics[0].partitions[0]
        return ErrorCode(answer.error_code), int(answer.offset)
