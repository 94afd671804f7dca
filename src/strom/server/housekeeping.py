"""A broker's periodic log work: retention, high-watermark checkpoints, interval flushes.

Each is a loop the broker runs as a background task once its partitions are open; each
reads the broker's current config (dynamic changes apply at the next round).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from strom.config import BrokerConfig
from strom.server.clock import now_ms
from strom.server.partitions import PartitionManager

log = logging.getLogger(__name__)


async def retention_loop(
    node_id: int, config: Callable[[], BrokerConfig], partitions: PartitionManager
) -> None:
    while True:
        await asyncio.sleep(config().log_retention_check_interval_ms / 1000)
        for partition in partitions:
            deleted = partition.log.delete_old_segments(now_ms())
            if deleted:
                log.info(
                    "[node %d] %s-%d: retention deleted %d segment(s); log starts at %d",
                    node_id,
                    partition.topic,
                    partition.index,
                    len(deleted),
                    partition.log.log_start_offset,
                )


async def checkpoint_loop(
    node_id: int, config: Callable[[], BrokerConfig], partitions: PartitionManager
) -> None:
    """Write every partition's high watermark to replication-offset-checkpoint."""
    while True:
        await asyncio.sleep(config().replica_high_watermark_checkpoint_interval_ms / 1000)
        offsets = partitions.checkpoint_snapshot()
        try:
            await asyncio.to_thread(partitions.write_checkpoint, offsets)
        except OSError as exc:
            log.warning("[node %d] high watermark checkpoint: %s", node_id, exc)


async def interval_flush_loop(
    config: Callable[[], BrokerConfig], partitions: PartitionManager
) -> None:
    """fsync the logs whose flush.ms or flush.messages came due between appends."""
    while True:
        await asyncio.sleep(min(config().log_flush_scheduler_interval_ms, 60_000) / 1000)
        current = now_ms()
        for partition in partitions:
            partition.flush_if_due(current)
