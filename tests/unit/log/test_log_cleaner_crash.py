"""A crash at any point of a cleaning pass leaves the partition whole: before or after.

A crash is simulated by stopping the swap after one of its steps (the step hook raises),
abandoning the PartitionLog without a clean close, and opening the directory again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cleaner_helpers import Entry, clean, keyed_batch, latest_by_key, open_log, put, read_all

from strom.log import PartitionLog
from strom.log.cleaner import CleaningAborted, CleaningResult
from strom.log.cleaner_build import build_cleaned
from strom.log.cleaner_swap import SWAP_MANIFEST_FILE

CONFIG = {"segment_bytes": 1_200, "index_interval_bytes": 100, "delete_retention_ms": 0}


class Crash(Exception):
    pass


def scenario(directory: Path) -> tuple[PartitionLog, CleaningResult, list[Entry]]:
    """A log with an earlier pass behind it (so the checkpoint changes too), idempotent
    producers, tombstones, several segments to merge; and a built, unswapped pass."""
    log = open_log(directory, **CONFIG)
    for i in range(60):
        put(log, f"k{i % 7}".encode(), f"v{i}".encode(), now_ms=i)
    put(log, b"k3", None, now_ms=60)
    log.roll(61)
    clean(log, now_ms=100)
    for i in range(40):
        batch = keyed_batch(
            [(f"k{i % 5}".encode(), f"w{i}".encode())],
            timestamp_ms=200 + i,
            producer_id=9,
            producer_epoch=0,
            base_sequence=i,
        )
        log.append([batch], now_ms=200 + i, leader_epoch=0)
    put(log, b"k4", None, now_ms=300)
    log.roll(301)
    plan = log.cleaning_plan(400)
    assert plan is not None
    before = read_all(log)
    return log, build_cleaned(plan), before


def swap_steps(tmp_path: Path) -> tuple[list[str], list[Entry], list[Entry]]:
    """The steps of an uninterrupted swap, the log after it, and after one more pass."""
    log, result, _ = scenario(tmp_path / "dry-run")
    steps: list[str] = []
    assert log.swap_cleaned(result, now_ms=400, step=steps.append)
    after = read_all(log)
    clean(log, now_ms=400)
    again = read_all(log)
    log.close()
    return steps, after, again


def test_a_swap_has_the_expected_steps(tmp_path: Path) -> None:
    steps, after, _ = swap_steps(tmp_path)
    assert steps[:3] == ["cleaned files written", "manifest written", "manifest committed"]
    assert steps[-3:] == ["segments synced", "checkpoint written", "manifest removed"]
    assert any(s.startswith("renamed") for s in steps)
    assert any(s.startswith("deleted") for s in steps)  # segments were merged
    assert after


def test_crash_after_every_step_of_the_swap(tmp_path: Path) -> None:
    steps, after, again = swap_steps(tmp_path)
    committed = steps.index("manifest written")
    for k, name in enumerate(steps):
        directory = tmp_path / f"crash-{k}"
        log, result, before = scenario(directory)
        assert before != after

        def stop(step: str, name: str = name) -> None:
            if step == name:
                raise Crash(step)

        with pytest.raises(Crash):
            log.swap_cleaned(result, now_ms=400, step=stop)
        log.close(clean=False)  # what a kill -9 leaves: no marker, no final fsyncs
        reopened = open_log(directory, **CONFIG)
        got = read_all(reopened)
        assert got == (after if k >= committed else before), name
        report = reopened.recovery_report
        assert not report.truncations and not report.deleted_segments, name
        names = os.listdir(directory)
        assert SWAP_MANIFEST_FILE not in names
        assert not [n for n in names if n.endswith((".cleaned", ".tmp"))], names
        # and the partition goes on: one more pass ends where it would have without a crash
        clean(reopened, now_ms=400)
        expected = again if k >= committed else after
        assert latest_by_key(read_all(reopened)) == latest_by_key(expected), name
        assert reopened.producer_state_for(9) is not None
        reopened.close()


def test_crash_while_building_leaves_only_removable_files(tmp_path: Path) -> None:
    log, result, before = scenario(tmp_path / "p")
    cleaned_log = result.files()[0]
    with open(cleaned_log, "r+b") as f:  # the build was cut off mid-write
        f.truncate(os.path.getsize(cleaned_log) // 2)
    log.close(clean=False)
    reopened = open_log(tmp_path / "p", **CONFIG)
    assert read_all(reopened) == before
    assert {Path(p).name for p in reopened.recovery_report.removed_files} >= {
        p.name for p in result.files()
    }
    reopened.close()


def test_a_stopped_build_removes_its_files(tmp_path: Path) -> None:
    log, result, before = scenario(tmp_path / "p")
    log.abandon_cleaning(result.plan, result)
    calls = 0

    def stop_soon() -> bool:
        nonlocal calls
        calls += 1
        return calls > 30

    plan = log.cleaning_plan(400)
    assert plan is not None
    with pytest.raises(CleaningAborted):
        build_cleaned(plan, stop_soon)
    log.abandon_cleaning(plan)
    assert not [n for n in os.listdir(tmp_path / "p") if n.endswith(".cleaned")]
    assert plan.fds == []  # the build released the plan's descriptors
    assert read_all(log) == before
    log.close()


def test_a_damaged_manifest_is_dropped(tmp_path: Path) -> None:
    log, _, before = scenario(tmp_path / "p")
    log.close(clean=False)
    (tmp_path / "p" / SWAP_MANIFEST_FILE).write_text("{not json")
    reopened = open_log(tmp_path / "p", **CONFIG)
    assert reopened.recovery_report.completed_swap == ()
    assert read_all(reopened) == before
    reopened.close()


def test_manifest_is_applied_again_until_removed(tmp_path: Path) -> None:
    """A manifest that survives a finished swap (its removal was not yet durable) is
    harmless to apply again."""
    log, result, _ = scenario(tmp_path / "p")
    manifest: dict[str, object] = {}

    def keep(step: str) -> None:
        if step == "manifest committed":
            manifest.update(json.loads((tmp_path / "p" / SWAP_MANIFEST_FILE).read_text()))

    assert log.swap_cleaned(result, now_ms=400, step=keep)
    after = read_all(log)
    log.close(clean=False)
    (tmp_path / "p" / SWAP_MANIFEST_FILE).write_text(json.dumps(manifest))
    reopened = open_log(tmp_path / "p", **CONFIG)
    assert reopened.recovery_report.completed_swap
    assert read_all(reopened) == after
    reopened.close()
