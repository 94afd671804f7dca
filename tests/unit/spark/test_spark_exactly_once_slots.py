"""The exactly-once sink's pure decisions: transactional ids and replay detection."""

from __future__ import annotations

import pytest

from strom.spark.exactly_once import (
    BATCH_WRITE_ID,
    TaskSlot,
    batch_id_of,
    default_prefix,
    task_slot,
)


def test_a_slot_depends_on_the_prefix_and_the_partition_only() -> None:
    slot = task_slot("strom-spark-q1", 3, 7)
    assert slot == TaskSlot("strom-spark-q1-p3", "strom-spark-q1-p3", 7)
    # Another batch of the same task position reuses the ids: one id per position.
    assert task_slot("strom-spark-q1", 3, 8).transactional_id == slot.transactional_id
    # Other positions and other prefixes never share one.
    ids = {task_slot(prefix, p, 0).transactional_id for prefix in ("a", "b") for p in range(20)}
    assert len(ids) == 40


def test_a_slot_refuses_negative_ids() -> None:
    with pytest.raises(ValueError, match="partition id -1"):
        task_slot("p", -1, 0)
    with pytest.raises(ValueError, match="batch id -2"):
        task_slot("p", 0, -2)


def test_a_task_skips_a_batch_its_slot_committed() -> None:
    slot = task_slot("p", 0, 5)
    assert slot.marker_offset == 6
    assert not slot.already_written(None)  # the group has no offset: never written
    assert not slot.already_written(-1001)  # librdkafka's "no offset"
    assert not slot.already_written(5)  # batch 4 committed, not 5
    assert slot.already_written(6)  # batch 5 committed: a replay
    assert slot.already_written(9)  # a later batch committed: long done


def test_a_batch_write_is_batch_zero_of_its_prefix() -> None:
    slot = task_slot("nightly", 1, BATCH_WRITE_ID)
    assert not slot.already_written(None)
    assert slot.already_written(1)  # an earlier run with this prefix committed this task


def test_a_query_id_makes_the_default_prefix() -> None:
    assert default_prefix("1f0e-42") == "strom-spark-1f0e-42"


def test_spark_batch_id_property() -> None:
    assert batch_id_of("12") == 12
    assert batch_id_of("0") == 0
    for text in (None, "", "-1", "1.5", "x", "١٢"):
        assert batch_id_of(text) is None
