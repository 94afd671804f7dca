"""The clients of a fault run: producers and consumers in threads of their own, each
appending what it did and was told to the shared History, and the final read.

Producers are confluent-kafka idempotent producers with acks=all. Producer `p1` writes
"p1-0", "p1-1", ... at a steady rate, write #seq to partition seq % partitions (explicit
partitions, so every partition gets every producer's writes in sequence order and a stuck
partition never stalls the others). A fatal idempotence error ends that client: the
worker notes it and carries on with a new one (a new producer id), as an application
would; the old client's unanswered writes stay unknown.

Consumers assign() themselves every partition from the beginning rather than join a
group: no rebalance ever moves a partition or rewinds to a committed offset, so each
consumer reads each partition in one pass and any backwards step is the broker's doing.
(confluent-kafka insists on a group.id; nothing is committed to it.)
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition

from .history import Acked, Event, Failed, FatalError, FinalRecord, History, Note, Read, Sent

CLIENT_LOG = logging.getLogger("fault.librdkafka")
REQUEST_TIMEOUT_MS = 5_000
MESSAGE_TIMEOUT_MS = 20_000
FLUSH_TIMEOUT_S = MESSAGE_TIMEOUT_MS / 1000 + 5
MAX_NOTES_PER_CLIENT = 200
POLL_S = 0.2


class Recorder:
    """Appends events to a History from any thread, stamped with seconds since the start
    of the run on the monotonic clock."""

    def __init__(self, history: History, clock: Callable[[], float] = time.monotonic) -> None:
        self.history = history
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()

    def now_s(self) -> float:
        return round(self._clock() - self._start, 4)

    def add(self, event: Event) -> None:
        with self._lock:
            self.history.events.append(event)

    def note(self, source: str, text: str) -> None:
        self.add(Note(self.now_s(), source, text))

    def events(self) -> list[Event]:
        """A copy of the events so far (the client threads go on appending)."""
        with self._lock:
            return list(self.history.events)


def _client_settings(bootstrap: str) -> dict[str, Any]:
    # librdkafka logs its critical lines (fatal errors) to Python logging, which pytest
    # shows for a failing test; other errors reach error_cb and become Notes.
    return {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOG,
        "log_level": 2,
        "socket.timeout.ms": 10_000,
    }


def _describe(error: KafkaError) -> str:
    return f"{error.name()}: {error.str()}"


def _record(message: Message) -> tuple[int, int, str]:
    """A consumed message's partition, offset and value."""
    partition, offset, value = message.partition(), message.offset(), message.value()
    assert partition is not None and offset is not None and value is not None, message
    return partition, offset, value.decode()


class _Worker(threading.Thread):
    def __init__(self, name: str, recorder: Recorder) -> None:
        super().__init__(name=f"fault-{name}", daemon=True)
        self.client_name = name
        self.recorder = recorder
        self.crash: BaseException | None = None
        self._notes = 0

    def note(self, text: str) -> None:
        self._notes += 1
        if self._notes <= MAX_NOTES_PER_CLIENT:
            self.recorder.note(self.client_name, text)
        elif self._notes == MAX_NOTES_PER_CLIENT + 1:
            self.recorder.note(self.client_name, "(further notes of this client left out)")

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # recorded; the runner fails the run with it
            self.crash = exc
            self.recorder.note(self.client_name, f"crashed: {traceback.format_exc()}")

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorker(_Worker):
    """Writes until `stop_sending` is set, then waits up to FLUSH_TIMEOUT_S for the answers
    to what it sent; what is still unanswered then is left unknown."""

    def __init__(
        self,
        name: str,
        recorder: Recorder,
        *,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate_per_s: float,
    ) -> None:
        super().__init__(name, recorder)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.interval_s = 1 / rate_per_s
        self.stop_sending = threading.Event()
        self._fatal: KafkaError | None = None
        self._reporting = True
        self._callback_crash: BaseException | None = None
        self._producer = self._new_producer()

    def _new_producer(self) -> Producer:
        return Producer(
            {
                **_client_settings(self.bootstrap),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # A paused leader holds requests without answering: give up on them soon
                # enough to look for the new leader within the run.
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                "error_cb": self._on_error_cb,
            }
        )

    def _on_error(self, error: KafkaError) -> None:
        if not error.fatal():
            self.note(f"client error: {_describe(error)}")
        elif self._fatal is None:
            self._fatal = error
            self.recorder.add(FatalError(self.recorder.now_s(), self.client_name, _describe(error)))

    def _on_error_cb(self, error: KafkaError) -> None:
        with self._guard_callback():
            self._on_error(error)

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        with self._guard_callback():
            if not self._reporting:
                return
            value = message.value().decode()
            partition = int(message.partition())
            now_s = self.recorder.now_s()
            if error is None:
                offset = message.offset()  # None for an implicit ack (see Acked)
                self.recorder.add(Acked(now_s, self.client_name, partition, value, offset))
            else:
                self.recorder.add(
                    Failed(now_s, self.client_name, partition, value, _describe(error))
                )

    @contextlib.contextmanager
    def _guard_callback(self) -> Iterator[None]:
        """Keep an exception inside a client callback: confluent-kafka on Python 3.11
        turns some of them into an unrelated SystemError. `_serve` raises it instead."""
        try:
            yield
        except BaseException as exc:
            if self._callback_crash is None:
                self._callback_crash = exc

    def _serve(self, timeout_s: float, *, flush: bool = False) -> None:
        """poll() (or flush()) the client: delivery reports and errors arrive here. A
        fatal error may come back as an exception; it is noted like one from error_cb."""
        try:
            if flush:
                self._producer.flush(timeout_s)
            else:
                self._producer.poll(timeout_s)
        except KafkaException as exc:
            self._on_error(exc.args[0])
        if self._callback_crash is not None:
            raise RuntimeError("a client callback failed") from self._callback_crash

    def _replace_after_fatal(self) -> None:
        if self._fatal is not None:
            self.note(f"replacing the client after its fatal error {_describe(self._fatal)}")
        self._serve(2.0, flush=True)  # delivers the reports of what the fatal error failed
        self._close_client()
        self._fatal = None
        self._producer = self._new_producer()
        self._reporting = True

    def _close_client(self) -> None:
        """Forget what the client has not answered (it stays unknown) and let it go."""
        self._reporting = False
        try:
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.poll(0)
        except KafkaException as exc:
            self.note(f"closing the client: {exc}")

    def work(self) -> None:
        try:
            self._send_until_stopped()
            deadline = time.monotonic() + FLUSH_TIMEOUT_S
            while len(self._producer) > 0 and time.monotonic() < deadline:
                if self._fatal is not None:
                    break
                self._serve(min(1.0, max(0.0, deadline - time.monotonic())), flush=True)
            if len(self._producer) > 0:
                unanswered = len(self._producer)
                self.note(f"{unanswered} writes still unanswered at the end")
        finally:
            self._close_client()

    def _send_until_stopped(self) -> None:
        seq = 0
        next_at = time.monotonic()
        while not self.stop_sending.is_set():
            if self._fatal is not None:
                self._replace_after_fatal()
            value = f"{self.client_name}-{seq}"
            partition = seq % self.partitions
            at_s = self.recorder.now_s()
            try:
                self._producer.produce(
                    self.topic,
                    value=value.encode(),
                    partition=partition,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self._serve(0.1)
                continue
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal():
                    self._on_error(error)
                else:
                    self.note(f"produce refused {value}: {_describe(error)}")
                    self._serve(0.1)
                continue
            self.recorder.add(Sent(at_s, self.client_name, seq, partition, value))
            seq += 1
            self._serve(0)
            next_at += self.interval_s
            wait_s = next_at - time.monotonic()
            if wait_s > 0:
                self._wait_serving(wait_s)
            elif wait_s < -1:  # fell behind (a full queue): no burst to catch up
                next_at = time.monotonic()

    def _wait_serving(self, wait_s: float) -> None:
        """Pace the writes, serving delivery reports meanwhile."""
        deadline = time.monotonic() + wait_s
        while not self.stop_sending.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._serve(min(remaining, 0.05))


class ConsumerWorker(_Worker):
    """Reads every partition from the beginning until `stop` is set."""

    def __init__(
        self, name: str, recorder: Recorder, *, bootstrap: str, topic: str, partitions: int
    ) -> None:
        super().__init__(name, recorder)
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.stop = threading.Event()
        self.next_offsets: dict[int, int] = {}
        """partition -> the offset after the last one read (read by the runner)."""

    def work(self) -> None:
        consumer = Consumer(
            {
                **_client_settings(self.bootstrap),
                "group.id": f"fault-{self.client_name}-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                "error_cb": lambda error: self.note(f"client error: {_describe(error)}"),
            }
        )
        try:
            consumer.assign(
                [
                    KafkaTopicPartition(self.topic, p, OFFSET_BEGINNING)
                    for p in range(self.partitions)
                ]
            )
            while not self.stop.is_set():
                message = consumer.poll(POLL_S)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    self.note(f"read error: {_describe(error)}")
                    continue
                partition, offset, value = _record(message)
                self.recorder.add(
                    Read(self.recorder.now_s(), self.client_name, partition, offset, value)
                )
                self.next_offsets[partition] = offset + 1
        finally:
            consumer.close()

    def caught_up(self, high_watermarks: dict[int, int]) -> bool:
        positions = dict(self.next_offsets)
        return all(positions.get(p, 0) >= high for p, high in high_watermarks.items() if high)


class FinalReadError(AssertionError):
    """The final read did not get every partition up to its high watermark in time."""


def _final_consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            **_client_settings(bootstrap),
            "group.id": f"fault-final-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
    )


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, high watermark), as each partition's leader says."""
    consumer = _final_consumer(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, p), timeout=5, cached=False
            )
            for p in range(partitions)
        }
    finally:
        consumer.close()


def final_read(
    bootstrap: str, topic: str, marks: dict[int, tuple[int, int]], timeout_s: float
) -> dict[int, list[FinalRecord]]:
    """Every partition from its log start to its high watermark, with a fresh consumer."""
    records: dict[int, list[FinalRecord]] = {p: [] for p in marks}
    next_offsets = {p: low for p, (low, _) in marks.items()}
    consumer = _final_consumer(bootstrap)
    try:
        consumer.assign([KafkaTopicPartition(topic, p, low) for p, (low, _) in marks.items()])
        deadline = time.monotonic() + timeout_s
        while any(next_offsets[p] < high for p, (_, high) in marks.items()):
            if time.monotonic() > deadline:
                progress = {p: f"{next_offsets[p]}/{high}" for p, (_, high) in marks.items()}
                raise FinalReadError(
                    f"the final read stopped short after {timeout_s:g} s: {progress}"
                )
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            partition, offset, value = _record(message)
            if next_offsets[partition] <= offset < marks[partition][1]:
                records[partition].append(FinalRecord(offset, value))
                next_offsets[partition] = offset + 1
        return records
    finally:
        consumer.close()
