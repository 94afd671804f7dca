"""Message searches: a consumer assigned to the chosen partitions reads from the starts
the query gives up to each partition's high watermark as it was when the search began,
keeping the records the matcher lets through, until enough are found or enough are read.

Each search runs in its own thread and reports its progress in a `Search`, which the
browser polls; the registry forgets finished searches after a while and keeps at most
a few running, so memory stays bounded.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strom.cli.common import CommandError, kafka_error_message
from strom.cli.group_admin import partition_bounds
from strom.console.backend import ClusterBackend
from strom.console.browse import (
    BrowseQuery,
    FoundRecord,
    Start,
    newest_first,
    records_to_read,
    start_offsets,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

POLL_S = 0.5
BATCH = 500
TIME_LIMIT_S = 60.0
KEEP_FINISHED = 20
MAX_RUNNING = 4


@dataclass(slots=True)
class Search:
    topic: str
    query: BrowseQuery
    id: str = field(default_factory=lambda: secrets.token_urlsafe(9))
    total: int = 0
    """Offsets between the starts and the ends: what a full scan reads at most."""
    scanned: int = 0
    found: list[FoundRecord] = field(default_factory=list)
    finished: threading.Event = field(default_factory=threading.Event)
    stopped_because: str = ""
    error: str | None = None
    cancelled: bool = False

    @property
    def done(self) -> bool:
        return self.finished.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Whether the search finished within `timeout_s`."""
        return self.finished.wait(timeout_s)

    def summary(self) -> str:
        if self.error is not None:
            return f"Search failed: {self.error}"
        if not self.done:
            return (
                f"Searching: read {self.scanned} of {self.total} records, {len(self.found)} found"
            )
        return f"Read {self.scanned} of {self.total} records, {len(self.found)} found" + (
            f" ({self.stopped_because})" if self.stopped_because else ""
        )

    @property
    def records(self) -> list[FoundRecord]:
        return newest_first(self.found)


def run_search(backend: ClusterBackend, search: Search) -> None:
    """Fill in `search` (its progress as it goes); errors end up in `search.error`."""
    try:
        _scan(backend, search)
    except CommandError as exc:
        search.error = exc.message
    except Exception as exc:  # the page shows it; the console keeps serving
        search.error = f"{type(exc).__name__}: {exc}"
    finally:
        search.finished.set()


def _scan(backend: ClusterBackend, search: Search) -> None:
    from confluent_kafka import TopicPartition

    query, topic = search.query, search.topic
    described = backend.connection.topic(backend.metadata(), topic)
    if query.partition is not None and query.partition not in described.partitions:
        count = len(described.partitions)
        raise CommandError(f"topic {topic!r} has no partition {query.partition} (it has {count})")
    chosen = sorted(described.partitions) if query.partition is None else [query.partition]
    at_ms = query.time_ms if query.start is Start.TIME else None
    found = partition_bounds(backend.admin, backend.connection, [(topic, p) for p in chosen], at_ms)
    bounds = {p: (b.earliest, b.log_end) for (_, p), b in found.items()}
    at_time = {p: b.at_time for (_, p), b in found.items() if b.at_time is not None}
    starts = start_offsets(query, bounds, at_time)
    search.total = records_to_read(starts, bounds)
    reading = {p: start for p, start in starts.items() if start < bounds[p][1]}
    if not reading:
        search.stopped_because = "nothing to read between the start and the end"
        return
    consumer = backend.consumer()
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in reading.items()])
        _read(consumer, search, {p: bounds[p][1] for p in reading})
    finally:
        consumer.close()


def _read(consumer: Consumer, search: Search, ends: dict[int, int]) -> None:
    query = search.query
    deadline = time.monotonic() + TIME_LIMIT_S
    open_partitions = set(ends)
    while open_partitions:
        if search.cancelled:
            search.stopped_because = "cancelled"
            return
        if time.monotonic() > deadline:
            search.stopped_because = f"stopped after {TIME_LIMIT_S:g} s"
            return
        for message in consumer.consume(BATCH, POLL_S):
            error = message.error()
            partition = message.partition() or 0
            if error is not None:
                if error.name() == "_PARTITION_EOF":
                    open_partitions.discard(partition)
                    continue
                if error.fatal() or error.name() in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC"):
                    raise CommandError(kafka_error_message(error.name(), error.str()))
                continue
            offset = message.offset() or 0
            if partition not in open_partitions or offset >= ends[partition]:
                open_partitions.discard(partition)
                continue
            search.scanned += 1
            if offset + 1 >= ends[partition]:
                open_partitions.discard(partition)
            if query.matcher.matches(message.key(), message.value()):
                search.found.append(_found(message))
                if len(search.found) >= query.limit:
                    search.stopped_because = f"the first {query.limit} matches"
                    return
            if search.scanned >= query.scan:
                search.stopped_because = f"read the most asked for, {query.scan} records"
                return


def _found(message: Message) -> FoundRecord:
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

    kind, stamp = message.timestamp()
    headers = message.headers() or []
    return FoundRecord(
        partition=message.partition() or 0,
        offset=message.offset() or 0,
        timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else stamp,
        key=message.key(),
        value=message.value(),
        headers=tuple(
            (name, value.encode() if isinstance(value, str) else value)
            for name, value in (headers.items() if isinstance(headers, dict) else headers)
        ),
    )


class Searches:
    """The searches started recently, by id."""

    def __init__(self, backend: ClusterBackend) -> None:
        self.backend = backend
        self._searches: OrderedDict[str, Search] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, topic: str, query: BrowseQuery) -> Search:
        search = Search(topic, query)
        with self._lock:
            running = [s for s in self._searches.values() if not s.done]
            if len(running) >= MAX_RUNNING:
                raise CommandError(
                    f"{len(running)} searches are running already; wait for one to finish"
                )
            self._searches[search.id] = search
            finished = [k for k, s in self._searches.items() if s.done]
            for key in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self._searches[key]
        thread = threading.Thread(
            target=run_search, args=(self.backend, search), name=f"search-{search.id}", daemon=True
        )
        thread.start()
        return search

    def get(self, search_id: str) -> Search | None:
        with self._lock:
            return self._searches.get(search_id)

    def cancel_all(self) -> None:
        with self._lock:
            for search in self._searches.values():
                search.cancelled = True
