"""The first half of opening a partition directory: finish what a crash interrupted and
load the segments, with a report of every repair (``PartitionLog.open`` does the rest)."""

from __future__ import annotations

from pathlib import Path

from strom.durable_files import sync_directory
from strom.log.cleaner_checkpoint import read_cleaner_checkpoint
from strom.log.cleaner_swap import complete_interrupted_swap
from strom.log.config import LogConfig
from strom.log.files import CLEAN_SHUTDOWN_FILE, list_directory, read_recovery_point
from strom.log.recovery import RecoveryReportBuilder, load_segments
from strom.log.segment import Segment


def load_directory(
    directory: Path, config: LogConfig, *, now_ms: int, create: bool
) -> tuple[list[Segment], RecoveryReportBuilder, int]:
    """(segments, the report so far, the recovery point the directory had).

    The clean-shutdown marker is consumed (a crash from here on must recover), an
    interrupted compaction swap is completed, stray files are removed, and the segments
    after the recovery point (all of them after an unclean shutdown) are checked batch
    by batch, a torn tail cut off."""
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    elif not directory.is_dir():
        raise FileNotFoundError(f"no partition directory {directory}")
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if clean:
        marker.unlink()
        sync_directory(directory)
    stored_point = read_recovery_point(directory)
    report = RecoveryReportBuilder(str(directory), clean, stored_point)
    report.completed_swap = complete_interrupted_swap(directory)
    listing = list_directory(directory)
    report.removed_files.extend(listing.removed)
    cleaned_offset = read_cleaner_checkpoint(directory).cleaned_offset
    segments = load_segments(
        directory, config, listing.logs, clean, stored_point, now_ms, report, cleaned_offset
    )
    return segments, report, stored_point
