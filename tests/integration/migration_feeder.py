"""A producer that keeps writing numbered records while a group's members are replaced:
bursts from a thread, then the rest of a fixed total at the end."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from confluent_kafka import Producer
from migration_members import Record


class Feeder:
    """Writes r0, r1, ... (acks=all, idempotent) to partitions 0, 1, ... in turn, `total`
    in all: `burst` records every `interval_s` from a thread once entered, until only
    `reserve` are left; `nudge()` then writes one per partition (so that a member that
    joins late still gets records to consume), and `finish()` stops the thread and writes
    what is left. Every write is flushed before the next, so what was produced is known
    exactly."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        total: int = 3000,
        burst: int = 12,
        interval_s: float = 0.1,
        reserve: int = 120,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.total = total
        self.burst = burst
        self.interval_s = interval_s
        self.reserve = reserve
        self._nudged_at = 0.0
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        self._produced: set[Record] = set()
        self._errors: list[str] = []
        self._sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(60)
        with self._lock:  # a test that failed leaves records unsent: drop them
            self._producer.purge(blocking=False)
            self._producer.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            room = self.total - self.reserve - self.sent
            if room <= 0 or self._errors:
                return
            self._write(min(self.burst, room))

    def nudge(self) -> None:
        """Once the thread has written its share: one record per partition (from the
        reserve), at most every 0.5 s and never after finish()."""
        now = time.monotonic()
        waiting = self._thread.ident is None or self._thread.is_alive()
        if waiting or self._stop.is_set() or now - self._nudged_at < 0.5:
            return
        self._nudged_at = now
        self._write(self.partitions)

    def _write(self, count: int) -> None:
        """Write up to `count` more records (fewer at the end of `total`)."""
        with self._lock:
            count = min(count, self.total - self._sent)
            for _ in range(count):
                seq = self._sent
                self._producer.produce(
                    self.topic,
                    f"r{seq}".encode(),
                    partition=seq % self.partitions,
                    on_delivery=self._delivered,
                )
                self._sent += 1
            left = self._producer.flush(30)
            if left:
                self._errors.append(f"{left} records not delivered within 30 s")

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self._errors.append(str(error))
        else:
            record = (message.partition(), message.offset(), message.value().decode())
            self._produced.add(record)

    @property
    def sent(self) -> int:
        with self._lock:
            return self._sent

    def finish(self) -> set[Record]:
        """Stop the thread, write what is left of `total`; every record produced."""
        self._stop.set()
        self._thread.join(60)
        self._write(self.total)
        with self._lock:
            assert not self._errors, f"the producer failed: {self._errors[:5]}"
            assert len(self._produced) == self.total, (len(self._produced), self.total)
            return set(self._produced)
