"""Client processes for tests/integration/test_txn_faults.py, run with the venv's python so
that the test can kill them with SIGKILL at any point.

    python txn_fault_app.py transform BOOTSTRAP SOURCE SINK GROUP TXN_ID BATCH DIE_AT
        A consume-transform-produce application: reads SOURCE in consumer group GROUP
        (static member, read_committed, no auto commit), writes each record uppercased
        as b"<partition>:<offset>:<VALUE>" to the same partition of SINK, and commits
        its input offsets with send_offsets_to_transaction in the same transaction, at
        most BATCH records per transaction. Prints "ready" once its producer is
        initialized and "committed <n>" after each committed transaction. Any error is
        raised: the test treats an exit of its own as a failure.
        DIE_AT is "-" (run until killed) or "N:PHASE:DELAY_MS": in its transaction
        number N (from 0), when it reaches PHASE, the process sends itself SIGKILL
        DELAY_MS ms later (from a thread, so the work goes on meanwhile). The phases, in
        order: "begun" (nothing written), "produced" (records handed to the client),
        "flushed" (records in the log), "offsets" (offsets sent to the transaction),
        "commit" (commit_transaction called), "committed" (it returned).

    python txn_fault_app.py hang BOOTSTRAP TOPIC TXN_ID TIMEOUT_MS
        Begins a transaction (transaction.timeout.ms TIMEOUT_MS), writes one record to
        partitions 0 and 1 of TOPIC, flushes them, prints "flushed", then waits to be
        killed, never ending the transaction.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

TIMEOUT_S = 30.0


def say(line: str) -> None:
    print(line, flush=True)


class KillPoint:
    """Where this process sends itself SIGKILL: a transaction number and a phase."""

    def __init__(self, spec: str) -> None:
        self.transaction, self.phase, self.delay_ms = -1, "", 0.0
        if spec != "-":
            number, self.phase, delay = spec.split(":")
            self.transaction, self.delay_ms = int(number), float(delay)

    def reached(self, transaction: int, phase: str) -> None:
        if (transaction, phase) != (self.transaction, self.phase):
            return
        if self.delay_ms <= 0:
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Timer(self.delay_ms / 1000, os.kill, (os.getpid(), signal.SIGKILL)).start()


def transform(
    bootstrap: str, source: str, sink: str, group: str, txn_id: str, batch: int, die: KillPoint
) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 1}
    )
    # First: a transaction the previous incarnation left open is aborted (and its pending
    # offsets dropped) before this one reads the group's committed offsets.
    producer.init_transactions(TIMEOUT_S)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": "transformer",  # a restart takes its place at once
            "session.timeout.ms": 10_000,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.subscribe([source])
    say("ready")
    transaction = 0
    while True:
        messages = consumer.consume(batch, timeout=0.2)
        for message in messages:
            error = message.error()
            if error is not None and (error.fatal() or message.topic() is not None):
                raise RuntimeError(f"consumer error: {error}")
        records = [m for m in messages if m.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        die.reached(transaction, "begun")
        next_offsets: dict[int, int] = {}
        for m in records:
            value = b"%d:%d:" % (m.partition(), m.offset()) + m.value().upper()
            producer.produce(sink, value, partition=m.partition())
            next_offsets[m.partition()] = m.offset() + 1
        die.reached(transaction, "produced")
        if die.transaction == transaction:  # else the commit flushes
            if producer.flush(TIMEOUT_S):
                raise RuntimeError("records not written")
            die.reached(transaction, "flushed")
        producer.send_offsets_to_transaction(
            [TopicPartition(source, p, o) for p, o in sorted(next_offsets.items())],
            consumer.consumer_group_metadata(),
            TIMEOUT_S,
        )
        die.reached(transaction, "offsets")
        die.reached(transaction, "commit")
        producer.commit_transaction(TIMEOUT_S)
        say(f"committed {len(records)}")
        die.reached(transaction, "committed")
        transaction += 1


def hang(bootstrap: str, topic: str, txn_id: str, timeout_ms: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, b"killed-%d" % partition, partition=partition)
    remaining = producer.flush(TIMEOUT_S)
    if remaining:
        raise RuntimeError(f"{remaining} records not written")
    say("flushed")
    time.sleep(3600)


def main(argv: list[str]) -> None:
    mode, *args = argv
    if mode == "transform":
        bootstrap, source, sink, group, txn_id, batch, die_at = args
        transform(bootstrap, source, sink, group, txn_id, int(batch), KillPoint(die_at))
    elif mode == "hang":
        bootstrap, topic, txn_id, timeout_ms = args
        hang(bootstrap, topic, txn_id, int(timeout_ms))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
