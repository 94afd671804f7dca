"""Data loss: fail with the reason, or log it and go on, as failOnDataLoss says."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyarrow")

from strom.spark.errors import DataLossError
from strom.spark.kafka import report
from strom.spark.offsets import DataLoss, LossKind, TopicPartition

LOSS = DataLoss(LossKind.DELETED, TopicPartition("events", 2), 10, 52)


def test_data_loss_fails_the_query_by_default() -> None:
    with pytest.raises(DataLossError) as caught:
        report([LOSS], fail_on_data_loss=True)
    message = str(caught.value)
    assert "records 10..51 of events-2 were deleted (retention)" in message
    assert "Set failOnDataLoss to false" in message


def test_data_loss_is_logged_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="strom.spark.kafka"):
        report([LOSS, DataLoss(LossKind.VANISHED, TopicPartition("gone", 0), 7, 7)], False)
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "the log now starts at 52; skipping them (failOnDataLoss is false)" in messages[0]
    assert (
        "partition gone-0 is gone (deleted, or no longer subscribed); the query had read it up to 7"
        in messages[1]
    )
