"""The share coordinator's shell prunes `__share_group_state` on real partition logs:
the log start moves to the lowest offset the share-partition states still need, as
DeleteRecords moves it, and a coordinator loaded from the pruned log answers what the
first one did."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from server_harness import LEADER_EPOCH, NODE_ID, TOPIC_ID, image_of, node, run

from strom.config import BrokerConfig, ConfigError, load_config
from strom.metadata.controller import NewTopic, TopicResult
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    PartitionRecord,
    TopicRecord,
)
from strom.server.share_coordinator import ShareCoordinatorService
from strom.share.placement import SHARE_STATE_TOPIC
from strom.share.records import StateBatch
from strom.share.state_port import ShareStateKey, ShareStateWrite

STATE_TOPIC_ID = uuid.UUID(int=0x5E)
KEY = ShareStateKey("g", TOPIC_ID, 0)
SETTINGS = (
    "share.coordinator.state.topic.num.partitions=1",
    "share.coordinator.snapshot.update.records.per.snapshot=2",
)


def _image() -> MetadataImage:
    """The harness's topic (whose partition 0 is the share-partition) and a one-partition
    `__share_group_state` led here."""
    return image_of().replay(
        [
            TopicRecord(SHARE_STATE_TOPIC, STATE_TOPIC_ID),
            PartitionRecord(STATE_TOPIC_ID, 0, (NODE_ID,), (NODE_ID,), NODE_ID, LEADER_EPOCH, 1),
            ConfigRecord(ConfigResourceType.TOPIC, SHARE_STATE_TOPIC, "cleanup.policy", "delete"),
        ]
    )


def _service(
    config: BrokerConfig, image: MetadataImage, partitions: object
) -> ShareCoordinatorService:
    async def no_creation(topics: list[NewTopic]) -> list[TopicResult]:
        raise AssertionError("the topic exists")

    service = ShareCoordinatorService(
        node_id=NODE_ID,
        config=lambda: config,
        image=lambda: image,
        partitions=partitions,  # type: ignore[arg-type]
        create_topics=no_creation,
    )
    service.follow(image)
    return service


def test_pruning_starts_the_log_at_the_latest_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="strom.server.share_coordinator")
    image = _image()
    config = load_config(overrides=[f"node.id={NODE_ID}", f"log.dirs={tmp_path}", *SETTINGS])
    here = node(tmp_path, image, *SETTINGS)
    partition = here.partitions.get(SHARE_STATE_TOPIC, 0)
    assert partition is not None

    async def scenario() -> tuple[object, object]:
        service = _service(config, image, here.partitions)
        assert await service.initialize(KEY, 0, 0) == (ErrorCode.none, None)  # a snapshot at 0
        await service.prune()
        assert partition.log.log_start_offset == 0  # nothing is redundant yet
        for i in range(10):  # updates at 1, 2, snapshot at 3, ..., snapshot at 9, update at 10
            write = ShareStateWrite(0, 0, -1, (StateBatch(i, i, 2, 1),))
            assert await service.write(KEY, write) == (ErrorCode.none, None)
        before = await service.read(KEY, 0)  # leader epoch 0 is new: an update at 11
        await service.prune()
        assert partition.log.log_start_offset == 9
        assert partition.high_watermark == 12
        assert "pruned __share_group_state-0: its log starts at 9 (was 0)" in caplog.text
        caplog.clear()
        await service.prune()  # nothing more to prune
        assert "pruned" not in caplog.text
        service.close()

        reloaded = _service(config, image, here.partitions)  # as a new leader would
        after = await reloaded.read(KEY, 0)
        reloaded.close()
        return before, after

    try:
        before, after = run(scenario())
    finally:
        here.close()
    assert after == before
    assert "3 record(s) loaded from offset 9" in caplog.text


def test_the_prune_interval_is_at_least_one_millisecond() -> None:
    key = "share.coordinator.state.topic.prune.interval.ms"
    assert load_config().share_coordinator.state_topic_prune_interval_ms == 300_000
    assert load_config(overrides=[f"{key}=1"]).share_coordinator.state_topic_prune_interval_ms == 1
    with pytest.raises(ConfigError, match=key):
        load_config(overrides=[f"{key}=0"])
