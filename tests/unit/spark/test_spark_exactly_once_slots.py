"""The exactly-once sink's pure decisions: transactional ids and replay detection."""

from __future__ import annotations

import pytest

from strom.spark.exactly_once import (
    BATCH_WRITE_ID,
    TaskSlot,
    batch_id_of,
    default_prefix,
    of_write,
    task_slot,
)


def test_each_attempt_has_its_own_transactional_id_and_every_attempt_one_group() -> None:
    slot = task_slot("strom-spark-q1", 3, 7, 0)
    assert slot == TaskSlot("strom-spark-q1-p3-a0", "strom-spark-q1-p3", 7, earlier_ids=())
    # Another batch of the same task position reuses the ids: a few ids per position.
    assert task_slot("strom-spark-q1", 3, 8, 0).transactional_id == slot.transactional_id
    # A retry takes another id (so a late worker of attempt 0 cannot fence it) and
    # shares the group (so a replay sees whichever attempt committed).
    retry = task_slot("strom-spark-q1", 3, 7, 1)
    assert retry.transactional_id == "strom-spark-q1-p3-a1"
    assert retry.group_id == slot.group_id
    # A retry aborts what the attempts before it left open, never what later ones did.
    assert retry.earlier_ids == ("strom-spark-q1-p3-a0",)
    assert task_slot("q", 0, 7, 3).earlier_ids == ("q-p0-a0", "q-p0-a1", "q-p0-a2")
    # Other positions, attempts and prefixes never share an id.
    ids = {
        task_slot(prefix, p, 0, a).transactional_id
        for prefix in ("a", "b")
        for p in range(20)
        for a in range(4)
    }
    assert len(ids) == 160


def test_a_slot_refuses_negative_ids() -> None:
    with pytest.raises(ValueError, match="partition id -1"):
        task_slot("p", -1, 0, 0)
    with pytest.raises(ValueError, match="batch id -2"):
        task_slot("p", 0, -2, 0)
    with pytest.raises(ValueError, match="attempt -3"):
        task_slot("p", 0, 0, -3)


def test_the_driver_knows_the_ids_of_its_write_from_any_other() -> None:
    for p, a in ((0, 0), (12, 3)):
        assert of_write("job", task_slot("job", p, 9, a).transactional_id)
    assert of_write("job", "job-p4")  # the id of a task before attempts were part of it
    others = [
        "job",
        "job-p",
        "job-pa0",
        "job-p1-a",
        "job-p1-b2",
        "job-p1-a2-x",
        "jobs-p1-a0",
        "other-job-p1-a0",
        "job-p1-p0-a0",  # a task of the write with the prefix "job-p1"
        "job-p\u0661-a0",  # a digit, but not an ASCII one
    ]
    assert [i for i in others if of_write("job", i)] == []
    assert of_write("job-p1", "job-p1-p0-a0")
    assert not of_write("job-p1", "job-p1-a0")


def test_a_task_skips_a_batch_its_slot_committed() -> None:
    slot = task_slot("p", 0, 5, 0)
    assert slot.marker_offset == 6
    assert not slot.already_written(None)  # the group has no offset: never written
    assert not slot.already_written(-1001)  # librdkafka's "no offset"
    assert not slot.already_written(5)  # batch 4 committed, not 5
    assert slot.already_written(6)  # batch 5 committed: a replay
    assert slot.already_written(9)  # a later batch committed: long done


def test_a_batch_write_is_batch_zero_of_its_prefix() -> None:
    slot = task_slot("nightly", 1, BATCH_WRITE_ID, 2)
    assert not slot.already_written(None)
    assert slot.already_written(1)  # an earlier run with this prefix committed this task


def test_a_query_id_makes_the_default_prefix() -> None:
    assert default_prefix("1f0e-42") == "strom-spark-1f0e-42"


def test_spark_batch_id_property() -> None:
    assert batch_id_of("12") == 12
    assert batch_id_of("0") == 0
    for text in (None, "", "-1", "1.5", "x", "١٢"):
        assert batch_id_of(text) is None
