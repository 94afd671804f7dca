"""Damaged data at start: a torn or garbled log tail is cut off and a missing index
rebuilt instead of being served; a data dir of another node or a bad config is refused.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from broker import BrokerProcess, free_port
from durability_helpers import (
    TOPIC,
    consume_all,
    create_topic,
    log_files,
    partition_dir,
    produce_values,
    seeded_rng,
    watermarks,
)

from strom.protocol.records import LOG_OVERHEAD, encode_batch, iter_batches

# --- damaged data at start --------------------------------------------------------------


def _append_random_garbage(log_path: Path, rng: random.Random) -> int:
    with open(log_path, "ab") as f:
        f.write(rng.randbytes(rng.randrange(1, 300)))
    return 0


def _append_batch_with_bad_crc(log_path: Path, rng: random.Random) -> int:
    """A plausible next batch (right base offset, sane length) whose CRC does not match."""
    data = log_path.read_bytes()
    last = [header for _, header in iter_batches(data)][-1]
    batch = bytearray(
        encode_batch(
            [(None, b"999999", [])],
            base_timestamp_ms=int(time.time() * 1000),
            base_offset=last.next_offset,
        )
    )
    batch[-1] ^= 0x55
    with open(log_path, "ab") as f:
        f.write(bytes(batch))
    return 0


def _cut_last_batch_in_half(log_path: Path, rng: random.Random) -> int:
    data = log_path.read_bytes()
    position, last = [(pos, header) for pos, header in iter_batches(data)][-1]
    assert position + last.size_bytes == len(data)
    cut = rng.randrange(1, last.size_bytes - 1)
    os.truncate(log_path, len(data) - cut)
    return last.records_count


def _cut_inside_last_header(log_path: Path, rng: random.Random) -> int:
    data = log_path.read_bytes()
    position, last = [(pos, header) for pos, header in iter_batches(data)][-1]
    os.truncate(log_path, position + rng.randrange(1, LOG_OVERHEAD + 10))
    return last.records_count


DAMAGE: dict[str, Callable[[Path, random.Random], int]] = {
    "random-garbage": _append_random_garbage,
    "batch-with-bad-crc": _append_batch_with_bad_crc,
    "last-batch-cut": _cut_last_batch_in_half,
    "cut-inside-header": _cut_inside_last_header,
}


# With the clean-shutdown marker kept, the broker trusts the log as Kafka does and only
# checks its structure (index entries, batch headers after the last one, the file's end):
# a CRC-only corruption is found by the batch-by-batch check of an unclean start.
TORN_TAIL_CASES = [
    pytest.param(damage, keep_marker, id=f"{damage}-{'marker-kept' if keep_marker else 'unclean'}")
    for damage in DAMAGE
    for keep_marker in (False, True)
    if not (keep_marker and damage == "batch-with-bad-crc")
]


@pytest.mark.parametrize(("damage", "keep_marker"), TORN_TAIL_CASES)
def test_torn_tail_is_repaired_at_start(
    new_broker: Callable[..., BrokerProcess], data_dir: Path, damage: str, keep_marker: bool
) -> None:
    rng = seeded_rng()
    broker = new_broker()
    create_topic(broker, TOPIC, 1)
    produce_values(broker, TOPIC, range(300), size=20)
    assert broker.stop() == 0
    directory = partition_dir(data_dir, TOPIC, 0)
    marker = directory / ".clean_shutdown"
    assert marker.exists()
    if not keep_marker:
        marker.unlink()
    lost = DAMAGE[damage](log_files(directory)[-1], rng)
    broker.start()
    assert "truncated" in broker.read_log()
    end = 300 - lost
    assert watermarks(broker, TOPIC, 0) == (0, end)
    records = consume_all(broker, TOPIC, 1)[0]
    assert [offset for offset, _ in records] == list(range(end))
    assert all(value.startswith(b"%d:" % offset) for offset, value in records)
    # Producing continues right after the last whole record.
    produce_values(broker, TOPIC, range(end, end + 10), size=20)
    records = consume_all(broker, TOPIC, 1)[0]
    assert [int(value.split(b":")[0]) for _, value in records] == list(range(end + 10))
    # And the repair itself was made durable: a clean restart finds nothing to fix.
    assert broker.stop() == 0
    log_before = len(broker.read_log())
    broker.start()
    assert "truncated" not in broker.read_log()[log_before:]
    assert watermarks(broker, TOPIC, 0) == (0, end + 10)


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "killed"])
def test_missing_index_is_rebuilt(
    new_broker: Callable[..., BrokerProcess], data_dir: Path, clean: bool
) -> None:
    broker = new_broker()
    create_topic(broker, TOPIC, 1, {"segment.bytes": "65536"})
    produce_values(broker, TOPIC, range(1500), size=100)
    if clean:
        assert broker.stop() == 0
    else:
        broker.kill()
    directory = partition_dir(data_dir, TOPIC, 0)
    assert len(log_files(directory)) > 2
    removed = sorted(directory.glob("*.index"))
    assert len(removed) > 2
    for path in (removed[0], removed[-1]):  # a closed segment and the active one
        path.unlink()
    broker.start()
    assert "rebuilt indexes" in broker.read_log()
    for path in (removed[0], removed[-1]):
        assert path.exists()
    assert watermarks(broker, TOPIC, 0) == (0, 1500)
    for offset in (0, 7, 333, 1000, 1499):
        first = consume_all(broker, TOPIC, 1, start={0: offset})[0][0]
        assert first[0] == offset and first[1].startswith(b"%d:" % offset)
    assert len(consume_all(broker, TOPIC, 1)[0]) == 1500


# --- refusing to start --------------------------------------------------------------------


def run_serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            f"127.0.0.1:{free_port()}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_data_dir_of_another_node_is_refused(
    new_broker: Callable[..., BrokerProcess], data_dir: Path
) -> None:
    broker = new_broker("--node-id", "1")
    assert broker.stop() == 0
    meta = (data_dir / "meta.properties").read_text()
    result = run_serve(data_dir, "--node-id", "2")
    assert result.returncode != 0
    assert "node 1" in result.stderr, result.stderr
    assert "ready" not in result.stdout
    assert (data_dir / "meta.properties").read_text() == meta


def test_invalid_config_key_is_refused_before_touching_disk(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-created"
    result = run_serve(data_dir, "--set", "log.retension.ms=5")
    assert result.returncode != 0
    assert "log.retension.ms" in result.stderr, result.stderr
    assert not data_dir.exists()
