"""The message browser's pure parts: what a search asks for, which records it keeps, and
how a key, value or header is shown (text, JSON or hex).

A query comes from a form's fields (strings); `BrowseQuery.parse` turns them into values
or a `BrowseError` naming the field that is wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TypeVar

E = TypeVar("E", bound=StrEnum)

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
DEFAULT_SCAN = 100_000
MAX_SCAN = 10_000_000


class BrowseError(ValueError):
    """A query field that cannot be used, with a message naming it."""


class Start(StrEnum):
    NEWEST = "newest"
    """The last `limit` records of each partition; with a search, the newest records the
    `scan` budget covers."""
    EARLIEST = "earliest"
    OFFSET = "offset"
    TIME = "time"


class Format(StrEnum):
    TEXT = "text"
    JSON = "json"
    HEX = "hex"


class SearchIn(StrEnum):
    BOTH = "both"
    KEY = "key"
    VALUE = "value"


@dataclass(frozen=True, slots=True)
class RecordMatcher:
    """Keeps records whose key or value (or both) contain `text`, or match it as a regular
    expression; case-insensitive; no text keeps every record. Bytes that are not UTF-8 are
    compared as their replacement characters."""

    pattern: re.Pattern[str] | None
    where: SearchIn = SearchIn.BOTH

    @staticmethod
    def create(text: str, where: SearchIn, regex: bool) -> RecordMatcher:
        if not text:
            return RecordMatcher(None, where)
        try:
            pattern = re.compile(text if regex else re.escape(text), re.IGNORECASE)
        except re.error as exc:
            raise BrowseError(f"search: {text!r} is not a regular expression: {exc}") from None
        return RecordMatcher(pattern, where)

    def matches(self, key: bytes | None, value: bytes | None) -> bool:
        if self.pattern is None:
            return True
        fields = {SearchIn.KEY: (key,), SearchIn.VALUE: (value,)}.get(self.where, (key, value))
        return any(
            data is not None and self.pattern.search(data.decode("utf-8", errors="replace"))
            for data in fields
        )


@dataclass(frozen=True, slots=True)
class BrowseQuery:
    partition: int | None
    """One partition, or None for all."""
    start: Start
    offset: int
    time_ms: int
    matcher: RecordMatcher
    limit: int
    """Stop after this many matching records."""
    scan: int
    """Stop after reading this many records, matching or not."""
    fmt: Format
    text: str
    regex: bool

    @staticmethod
    def parse(fields: Mapping[str, str]) -> BrowseQuery:
        def number(name: str, default: int, low: int, high: int) -> int:
            text = fields.get(name, "").strip()
            if not text:
                return default
            try:
                value = int(text)
            except ValueError:
                raise BrowseError(f"{name}: {text!r} is not a whole number") from None
            if not low <= value <= high:
                raise BrowseError(f"{name}: {value} is not between {low} and {high}")
            return value

        partition_text = fields.get("partition", "").strip()
        partition = None if partition_text in ("", "all") else number("partition", 0, 0, 2**31)
        start = _choice(Start, fields.get("start", ""), Start.NEWEST, "start")
        offset = number("offset", 0, 0, 2**63 - 1) if start is Start.OFFSET else 0
        time_ms = parse_time(fields.get("time", "")) if start is Start.TIME else 0
        text = fields.get("search", "")
        regex = fields.get("regex", "") in ("1", "on", "true")
        where = _choice(SearchIn, fields.get("in", ""), SearchIn.BOTH, "in")
        return BrowseQuery(
            partition=partition,
            start=start,
            offset=offset,
            time_ms=time_ms,
            matcher=RecordMatcher.create(text, where, regex),
            limit=number("limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
            scan=number("scan", DEFAULT_SCAN, 1, MAX_SCAN),
            fmt=_choice(Format, fields.get("format", ""), Format.TEXT, "format"),
            text=text,
            regex=regex,
        )


def _choice(kind: type[E], text: str, default: E, name: str) -> E:
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        allowed = ", ".join(e.value for e in kind)
        raise BrowseError(f"{name}: {text!r} is not one of {allowed}") from None


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date and time (UTC when no offset is
    given, as a browser's datetime-local field sends it)."""
    stripped = text.strip()
    if not stripped:
        raise BrowseError("time: give a date and time, or milliseconds since the epoch")
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise BrowseError(f"time: {stripped!r} is not a date and time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def show(data: bytes | None, fmt: Format) -> str:
    """A key, value or header as the user asked to see it; "null" for a missing one."""
    if data is None:
        return "null"
    if fmt is Format.HEX:
        return data.hex(" ")
    text = data.decode("utf-8", errors="replace")
    if fmt is Format.JSON:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text  # not JSON: shown as text
    return text


@dataclass(frozen=True, slots=True)
class FoundRecord:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]

    def cells(self, fmt: Format) -> tuple[str, ...]:
        when = (
            "-"
            if self.timestamp_ms is None
            else datetime.fromtimestamp(self.timestamp_ms / 1000, UTC).isoformat(
                timespec="milliseconds"
            )
        )
        headers = "\n".join(f"{name}: {show(value, fmt)}" for name, value in self.headers)
        return (
            str(self.partition),
            str(self.offset),
            when,
            show(self.key, fmt),
            show(self.value, fmt),
            headers,
        )


def parse_headers(text: str) -> list[tuple[str, bytes]]:
    """The produce form's headers: one `name: value` (or `name=value`) per line."""
    headers = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = re.match(r"\s*([^:=]+?)\s*[:=]\s?(.*)$", line)
        if match is None:
            raise BrowseError(f"headers, line {number}: write name: value")
        headers.append((match.group(1), match.group(2).encode()))
    return headers


def start_offsets(
    query: BrowseQuery, bounds: Mapping[int, tuple[int, int]], at_time: Mapping[int, int]
) -> dict[int, int]:
    """Where each partition's reading starts, inside its [low, high) bounds; `at_time`
    holds each partition's first offset at or after the query's time (-1: none)."""
    starts = {}
    # Newest: the last `limit` records of each partition to look at, or with a search, the
    # newest records that the reading budget covers, shared between the partitions.
    searching = query.matcher.pattern is not None
    window = max(1, query.scan // max(1, len(bounds))) if searching else query.limit
    for partition, (low, high) in bounds.items():
        if query.start is Start.EARLIEST:
            start = low
        elif query.start is Start.NEWEST:
            start = max(low, high - window)
        elif query.start is Start.OFFSET:
            start = min(max(query.offset, low), high)
        else:
            found = at_time.get(partition, -1)
            start = high if found < 0 else min(max(found, low), high)
        starts[partition] = start
    return starts


def records_to_read(starts: Mapping[int, int], bounds: Mapping[int, tuple[int, int]]) -> int:
    """How many offsets lie between the starts and the ends (an upper bound on records:
    compaction and transaction markers leave gaps)."""
    return sum(max(0, bounds[p][1] - start) for p, start in starts.items())


def newest_first(records: Sequence[FoundRecord]) -> list[FoundRecord]:
    return sorted(records, key=lambda r: (r.timestamp_ms or 0, r.partition, r.offset), reverse=True)
