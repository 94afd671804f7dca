"""Retention on a real broker: old segments are deleted by time and by size, never the
active one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from broker import BrokerProcess
from durability_helpers import (
    TOPIC,
    consume_all,
    create_topic,
    log_files,
    partition_dir,
    produce_values,
    wait_until,
    watermarks,
)

# --- retention ------------------------------------------------------------------------


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(
    new_broker: Callable[..., BrokerProcess], data_dir: Path
) -> None:
    broker = new_broker("--set", "log.retention.check.interval.ms=200")
    create_topic(broker, TOPIC, 1, {"segment.bytes": "4096", "retention.ms": "1000"})
    directory = partition_dir(data_dir, TOPIC, 0)
    produce_values(broker, TOPIC, range(400))
    segments_before = len(log_files(directory))
    assert segments_before > 3
    assert watermarks(broker, TOPIC, 0) == (0, 400)
    # Every closed segment ages out; the active one stays however old it gets.
    wait_until(lambda: len(log_files(directory)) == 1, "retention to delete old segments")
    low, high = watermarks(broker, TOPIC, 0)
    assert 0 < low < high == 400
    assert "retention deleted" in broker.read_log()
    remaining = consume_all(broker, TOPIC, 1)[0]
    assert [offset for offset, _ in remaining] == list(range(low, 400))
    assert all(value.startswith(b"%d:" % offset) for offset, value in remaining)
    produce_values(broker, TOPIC, range(400, 450))
    assert watermarks(broker, TOPIC, 0)[1] == 450
    assert consume_all(broker, TOPIC, 1, start={0: 445})[0][-1][0] == 449


def test_retention_by_size(new_broker: Callable[..., BrokerProcess], data_dir: Path) -> None:
    broker = new_broker("--set", "log.retention.check.interval.ms=200")
    retention_bytes = 8192
    create_topic(
        broker, TOPIC, 1, {"segment.bytes": "4096", "retention.bytes": str(retention_bytes)}
    )
    directory = partition_dir(data_dir, TOPIC, 0)
    produce_values(broker, TOPIC, range(400))

    def total_bytes() -> int:
        return sum(path.stat().st_size for path in log_files(directory))

    wait_until(lambda: watermarks(broker, TOPIC, 0)[0] > 0, "retention to move the log start")
    wait_until(lambda: total_bytes() <= retention_bytes + 4096, "the log to shrink")
    assert len(log_files(directory)) >= 2  # only the oldest segments go
    low, high = watermarks(broker, TOPIC, 0)
    assert high == 400
    remaining = consume_all(broker, TOPIC, 1)[0]
    assert [offset for offset, _ in remaining] == list(range(low, 400))
    produce_values(broker, TOPIC, range(400, 420))
    assert watermarks(broker, TOPIC, 0)[1] == 420
