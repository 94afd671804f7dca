"""One log segment: a file of stamped batches plus its offset and time indexes.

Files are named by the segment's base offset, zero-padded to 20 digits, as Kafka does.
The log file is opened once, ``O_RDWR | O_APPEND``: appends are a single ``os.writev``,
reads are positional (``os.pread``) on the same descriptor.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from strom.log.index import OffsetIndex, TimeIndex
from strom.log.results import ReadResult
from strom.log.txn_index import TXN_INDEX_SUFFIX, TxnIndexFile
from strom.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    parse_batch_header,
)

__all__ = [
    "LOG_SUFFIX",
    "OFFSET_INDEX_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "BatchInfo",
    "Segment",
    "iter_stored_batches",
    "scan_headers",
    "segment_path",
]

LOG_SUFFIX = ".log"
OFFSET_INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
_HEADER_WINDOW = 32 * 1024
_RECOVERY_CHUNK = 4 * 1024 * 1024
_IOV_MAX = 1024  # Linux's limit; os.writev fails beyond the platform's IOV_MAX

BatchInfo = tuple[int, int, int, int]
"""(position, base offset, max timestamp, size in bytes) of one stored batch."""


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:020d}{suffix}"


def _header_is_sane(header: BatchHeader) -> bool:
    return (
        header.batch_length >= MIN_BATCH_LENGTH
        and header.magic == 2
        and header.last_offset_delta >= 0
        and header.base_offset >= 0
    )


def _scan(
    fd: int, start: int, end: int, *, window: int, with_bytes: bool
) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
    """The complete, sane batches in ``[start, end)``, read through a moving window.

    Stops silently at the first batch that is incomplete or has an impossible header;
    the caller compares where it stopped. With ``with_bytes`` the window is widened to
    hold each whole batch and its bytes are yielded too.
    """
    buf = b""
    buf_start = start
    pos = start
    while end - pos >= BATCH_HEADER_SIZE:
        relative = pos - buf_start
        if relative + BATCH_HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(window, end - pos), pos)
            buf_start, relative = pos, 0
            if len(buf) < BATCH_HEADER_SIZE:
                return
        header = parse_batch_header(buf, relative)
        if not _header_is_sane(header):
            return
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            return
        data = None
        if with_bytes:
            if relative + size > len(buf):
                buf = os.pread(fd, min(max(window, size), end - pos), pos)
                buf_start, relative = pos, 0
                if len(buf) < size:
                    return
            data = memoryview(buf)[relative : relative + size]
        yield pos, header, data
        pos += size


def scan_headers(fd: int, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of the complete, sane batches in ``[start, end)``,
    reading small windows of the file rather than whole batches."""
    for pos, header, _ in _scan(fd, start, end, window=_HEADER_WINDOW, with_bytes=False):
        yield pos, header


def iter_stored_batches(
    fd: int, start: int, end: int
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Like ``scan_headers`` but also yields each batch's bytes (for CRC checks)."""
    for pos, header, data in _scan(fd, start, end, window=_RECOVERY_CHUNK, with_bytes=True):
        assert data is not None
        yield pos, header, data


class Segment:
    """A segment's files and what is known about them in memory."""

    # Transitions: open -> (append | truncate_to | rebuild_indexes)* -> closed.
    # Only the newest segment of a log (the active one) is appended to.
    __slots__ = (
        "_bytes_since_index",
        "_time_index_last_ts",
        "base_offset",
        "directory",
        "fd",
        "index_interval_bytes",
        "last_modified_ms",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "rolling_base_ms",
        "size_bytes",
        "time_index",
        "txn_index",
    )

    def __init__(
        self, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.fd = os.open(segment_path(directory, base_offset, LOG_SUFFIX), _OPEN_FLAGS, 0o644)
        try:
            self.offset_index = OffsetIndex(
                segment_path(directory, base_offset, OFFSET_INDEX_SUFFIX), base_offset
            )
            self.time_index = TimeIndex(
                segment_path(directory, base_offset, TIME_INDEX_SUFFIX), base_offset
            )
        except BaseException:
            os.close(self.fd)
            raise
        self.txn_index = TxnIndexFile(segment_path(directory, base_offset, TXN_INDEX_SUFFIX))
        self.size_bytes = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.rolling_base_ms: int | None = None
        self.last_modified_ms = now_ms
        self._bytes_since_index = 0
        self._time_index_last_ts = -1

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int
    ) -> Segment:
        """A new, empty segment (stale files of the same name are removed first)."""
        for suffix in (LOG_SUFFIX, OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            segment_path(directory, base_offset, suffix).unlink(missing_ok=True)
        return cls(directory, base_offset, index_interval_bytes=index_interval_bytes, now_ms=now_ms)

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    @property
    def largest_timestamp(self) -> int:
        """Newest record timestamp, or the last append time if no record has one."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    def file_size(self) -> int:
        return os.fstat(self.fd).st_size

    # ------------------------------------------------------------------ append

    def append(
        self,
        pieces: Sequence[bytes | memoryview],
        batches: Sequence[BatchInfo],
        *,
        next_offset: int,
        now_ms: int,
    ) -> None:
        """Write ``pieces`` (one ``writev``) and index the batches they hold.

        ``batches`` carry positions relative to the segment's current end.
        """
        expected = sum(info[3] for info in batches)
        if len(pieces) <= _IOV_MAX:
            written = os.writev(self.fd, pieces)
        else:  # pragma: no cover - more than ~500 batches in one append
            written = 0
            for i in range(0, len(pieces), _IOV_MAX):
                written += os.writev(self.fd, pieces[i : i + _IOV_MAX])
        if written != expected:
            os.ftruncate(self.fd, self.size_bytes)
            raise OSError(errno.ENOSPC, f"short write: {written} of {expected} bytes")
        start = self.size_bytes
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        self._index(
            ((start + p, base, ts, size) for p, base, ts, size in batches),
            offset_entries,
            time_entries,
        )
        self.size_bytes = start + written
        self.next_offset = next_offset
        self.last_modified_ms = now_ms
        if self.rolling_base_ms is None:
            self.rolling_base_ms = now_ms
        if offset_entries:
            self.offset_index.append(offset_entries)
        if time_entries:
            self.time_index.append(time_entries)

    def _index(
        self,
        batches: Iterable[BatchInfo],
        offset_entries: list[tuple[int, int]],
        time_entries: list[tuple[int, int]],
    ) -> None:
        """Kafka's rule: one index entry once more than the interval has been written."""
        interval = self.index_interval_bytes
        for position, base_offset, max_timestamp, size in batches:
            if max_timestamp > self.max_timestamp:
                self.max_timestamp = max_timestamp
                self.offset_of_max_timestamp = base_offset
            if self._bytes_since_index > interval:
                offset_entries.append((base_offset, position))
                if self.max_timestamp > self._time_index_last_ts:
                    time_entries.append((self.max_timestamp, self.offset_of_max_timestamp))
                    self._time_index_last_ts = self.max_timestamp
                self._bytes_since_index = 0
            self._bytes_since_index += size

    def seal(self) -> None:
        """The segment stops being active: record its largest timestamp in the time index."""
        if self.max_timestamp > self._time_index_last_ts:
            self.time_index.append([(self.max_timestamp, self.offset_of_max_timestamp)])
            self._time_index_last_ts = self.max_timestamp

    # ------------------------------------------------------------------ indexes

    def rebuild_indexes(self, batches: Iterable[BatchInfo]) -> None:
        """Replace both indexes (and the in-memory summary) from the given batches."""
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        self._time_index_last_ts = -1
        offset_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        self._index(batches, offset_entries, time_entries)
        self.offset_index.replace(offset_entries)
        self.time_index.replace(time_entries)

    def adopt_loaded_indexes(
        self, tail: Sequence[BatchInfo], next_offset: int, size_bytes: int
    ) -> None:
        """Take over state from sane index files plus the batches after the last entry."""
        self.next_offset = next_offset
        self.size_bytes = size_bytes
        last_time = self.time_index.last_entry()
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time
            self._time_index_last_ts = last_time[0]
        self._bytes_since_index = 0
        for _, base_offset, max_timestamp, size in tail:
            if max_timestamp > self.max_timestamp:
                self.max_timestamp = max_timestamp
                self.offset_of_max_timestamp = base_offset
            self._bytes_since_index += size

    # ------------------------------------------------------------------ reads

    def read_header(self, position: int) -> BatchHeader | None:
        data = os.pread(self.fd, BATCH_HEADER_SIZE, position)
        if len(data) < BATCH_HEADER_SIZE:
            return None
        return parse_batch_header(data)

    def headers(self, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        return scan_headers(self.fd, start, self.size_bytes)

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``."""
        _, position = self.offset_index.lookup(offset)
        for pos, header in scan_headers(self.fd, position, self.size_bytes):
            if header.base_offset + header.last_offset_delta >= offset:
                return pos, header
        return None

    def read(
        self, fetch_offset: int, max_bytes: int, *, limit: int, min_one_batch: bool
    ) -> ReadResult | None:
        """Batches from the one holding ``fetch_offset``; None if this segment has none.

        Whole batches only, none with a base offset at or above ``limit``, at most
        ``max_bytes`` unless ``min_one_batch`` needs one larger batch. Decodes nothing:
        the first batch is found from the offset index plus a short header scan, the end
        from the index entries (which sit on batch boundaries) plus another short scan.
        """
        found = self.find_batch(fetch_offset)
        if found is None:
            return None
        start, first = found
        if first.base_offset >= limit:
            return ReadResult(self.fd, start, 0, fetch_offset, fetch_offset)
        if self.size_bytes - start <= max_bytes and self.next_offset <= limit:
            return ReadResult(
                self.fd, start, self.size_bytes - start, first.base_offset, self.next_offset
            )
        # Everything before an index entry at or below both bounds is returned whole.
        scan_from, next_offset = start, first.base_offset
        by_bytes = self.offset_index.floor_position(start + max_bytes)
        by_offset = self.offset_index.lookup(limit)
        jump_offset, jump_position = min(by_bytes, by_offset, key=lambda entry: entry[1])
        if jump_position > start:
            scan_from, next_offset = jump_position, jump_offset
        size = scan_from - start
        for _, header in scan_headers(self.fd, scan_from, self.size_bytes):
            if header.base_offset >= limit:
                break
            batch_size = header.batch_length + LOG_OVERHEAD
            if size + batch_size > max_bytes and (size or not min_one_batch):
                break
            size += batch_size
            next_offset = header.base_offset + header.last_offset_delta + 1
        if size == 0:
            return ReadResult(self.fd, start, 0, fetch_offset, fetch_offset)
        return ReadResult(self.fd, start, size, first.base_offset, next_offset)

    def read_batch(self, position: int, size: int) -> bytes:
        return os.pread(self.fd, size, position)

    # ------------------------------------------------------------------ changes

    def truncate_to(self, position: int, next_offset: int) -> None:
        """Cut the log file at ``position`` (fsynced) and rebuild the indexes; aborted
        transactions whose marker is cut go from the transaction index."""
        os.ftruncate(self.fd, position)
        os.fsync(self.fd)
        self.size_bytes = position
        self.next_offset = next_offset
        self.rebuild_indexes(
            (pos, h.base_offset, h.max_timestamp, h.size_bytes) for pos, h in self.headers()
        )
        self.txn_index.truncate_to(next_offset)
        self.sync_indexes()

    def sync_indexes(self) -> None:
        self.offset_index.sync()
        self.time_index.sync()
        self.txn_index.sync()

    def sync(self) -> None:
        os.fsync(self.fd)
        self.sync_indexes()

    def fds(self) -> tuple[int, int, int]:
        return self.fd, self.offset_index.fd, self.time_index.fd

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        for suffix in (LOG_SUFFIX, OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            segment_path(self.directory, self.base_offset, suffix).unlink(missing_ok=True)
