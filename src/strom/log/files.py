"""File names and small-file helpers of a partition directory.

A partition directory holds, per segment, ``<base>.log``, ``<base>.index`` and
``<base>.timeindex`` (base offset zero-padded to 20 digits), and ``<base>.txnindex`` when
the segment holds ABORT markers; producer state snapshots
``<offset>.snapshot``; ``recovery-point`` (text: the base offset of the oldest segment
that may hold data or index entries not yet fsynced); ``log-start-offset`` (text: the
log start set by DeleteRecords, when it lies inside the first segment); and
``.clean_shutdown``, present only between a clean close and the next open.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from strom.durable_files import TMP_SUFFIX, replace_file
from strom.log.segment import LOG_SUFFIX, OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_FILE",
    "RECOVERY_POINT_FILE",
    "SNAPSHOT_SUFFIX",
    "DirectoryListing",
    "list_directory",
    "read_recovery_point",
    "snapshot_path",
]

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
RECOVERY_POINT_FILE = "recovery-point"
LOG_START_FILE = "log-start-offset"
SNAPSHOT_SUFFIX = ".snapshot"
_STRAY_SUFFIXES = (TMP_SUFFIX, ".deleted", ".cleaned", ".swap")
_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)$")


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


@dataclass(slots=True)
class DirectoryListing:
    # Transitions: filled once by list_directory, then read.
    logs: list[int] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def list_directory(directory: Path) -> DirectoryListing:
    """Sort a partition directory's files; removes leftovers of interrupted writes and
    index files whose log file is gone."""
    listing = DirectoryListing()
    indexes: dict[int, list[str]] = {}
    for name in os.listdir(directory):
        if name.endswith(_STRAY_SUFFIXES):
            (directory / name).unlink(missing_ok=True)
            listing.removed.append(name)
            continue
        match = _NAME.match(name)
        if match is None:
            continue
        offset, suffix = int(match.group(1)), match.group(2)
        if suffix == LOG_SUFFIX:
            listing.logs.append(offset)
        elif suffix == SNAPSHOT_SUFFIX:
            listing.snapshots.append(offset)
        elif suffix in (OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            indexes.setdefault(offset, []).append(name)
    logs = set(listing.logs)
    for offset, names in indexes.items():
        if offset not in logs:
            for name in names:
                (directory / name).unlink(missing_ok=True)
                listing.removed.append(name)
    listing.logs.sort()
    listing.snapshots.sort()
    return listing


def read_recovery_point(directory: Path) -> int:
    """The stored recovery point; 0 (check everything) when missing or unreadable."""
    try:
        return max(0, int((directory / RECOVERY_POINT_FILE).read_text().strip()))
    except (OSError, ValueError):
        return 0


def write_recovery_point(directory: Path, offset: int) -> None:
    """Replace the recovery point: the file is fsynced, its directory is not."""
    replace_file(directory / RECOVERY_POINT_FILE, f"{offset}\n".encode(), sync_dir=False)


def read_log_start(directory: Path) -> int:
    """The log start DeleteRecords stored; -1 when there is none (or it is unreadable,
    which leaves the start at the first segment's base: a deletion is then undone, never
    data lost)."""
    try:
        return int((directory / LOG_START_FILE).read_text().strip())
    except (OSError, ValueError):
        return -1


def write_log_start(directory: Path, offset: int) -> None:
    """Replace the stored log start durably (file and directory fsynced)."""
    replace_file(directory / LOG_START_FILE, f"{offset}\n".encode())
