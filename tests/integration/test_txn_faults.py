"""Transactions under kill -9, with real clients over real sockets: a consume-transform-
produce application killed at random points and restarted (exactly once, in order), a
producer killed in the middle of a transaction (the coordinator's timeout aborts it and
read_committed readers get past it), and a three-node cluster whose transaction
coordinator is killed while commits are in flight (every acknowledged transaction is
there once; none is there in part).

The random choices come from a seed named in any failure; STROM_FAULT_SEED=<seed>
replays them (the timing of the processes still varies)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from client_helpers import CLIENT_TIMEOUT_S, confluent_consumer, create_topic, unique_topic
from confluent_kafka import KafkaException, Producer, TopicPartition
from test_txn_clients import TXN_TIMEOUT_S, read_values, txn_producer

from strom.cli.txn import describe_transaction, run
from strom.cli.txn_model import TxnDescription
from strom.testing import StromCluster
from strom.txn.placement import TRANSACTION_STATE_TOPIC, partition_for

APP = Path(__file__).with_name("txn_fault_app.py")
WAIT_S = 60.0


@contextmanager
def seeded() -> Iterator[random.Random]:
    """A seeded random.Random; a failure inside names the seed that replays it."""
    given = os.environ.get("STROM_FAULT_SEED")
    seed = int(given) if given else random.randrange(2**32)
    try:
        yield random.Random(seed)
    except BaseException as exc:
        exc.add_note(f"random seed {seed}: STROM_FAULT_SEED={seed} replays its choices")
        raise


class ClientProcess:
    """A txn_fault_app.py process: its stdout lines collected by a thread, its stderr
    in a file; kill() is SIGKILL."""

    def __init__(self, log_dir: Path, *args: str) -> None:
        self.stderr_path = log_dir / f"app-{uuid.uuid4().hex[:6]}.err"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, str(APP), *args],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            with self._changed:
                self.lines.append(raw.decode().strip())
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def commits(self) -> int:
        return sum(1 for line in self.lines if line.startswith("committed"))

    def wait_for(self, seen: Callable[[list[str]], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        with self._changed:
            while not seen(self.lines):
                self.check_alive()
                left = deadline - time.monotonic()
                assert left > 0, f"gave up waiting for the app to {what}: {self.lines[-5:]}"
                self._changed.wait(min(left, 0.2))

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise AssertionError(
                f"the app exited by itself ({code}); its stderr:\n"
                + self.stderr_path.read_text()[-3000:]
            )

    def wait_for_kill(self, what: str) -> None:
        """Wait until the process is gone; it must have died of SIGKILL."""
        try:
            code = self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the app did not {what}: {self.lines[-5:]}") from None
        stderr = self.stderr_path.read_text()[-3000:]
        assert code == -signal.SIGKILL, f"the app exited ({code}) instead of dying: {stderr}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(10)


@contextmanager
def client_process(log_dir: Path, *args: str) -> Iterator[ClientProcess]:
    app = ClientProcess(log_dir, *args)
    try:
        yield app
    finally:
        app.kill()


def produce_inputs(bootstrap: str, topic: str, count: int, partitions: int) -> list[list[bytes]]:
    """`count` records spread over the partitions; each partition's values by offset."""
    placed: dict[tuple[int, int], bytes] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def delivered(err: object, msg: object) -> None:
        assert err is None, f"input not written: {err}"
        placed[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    for i in range(count):
        value = b"record-%d-of-%d" % (i, count)
        producer.produce(topic, value, partition=i % partitions, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    by_partition = []
    for p in range(partitions):
        offsets = sorted(o for q, o in placed if q == p)
        assert offsets == list(range(len(offsets))), f"input partition {p}: offsets {offsets}"
        by_partition.append([placed[(p, o)] for o in offsets])
    return by_partition


# --- 1. consume-transform-produce, the application killed -------------------------------


KILL_PHASES = ("produced", "flushed", "offsets", "commit", "committed")
"""Where the app kills itself (txn_fault_app.py): records not yet sent or sent, its
records in the log, its offsets pending too, in the middle of its commit, after it."""


def test_consume_transform_produce_is_exactly_once_when_the_app_is_killed(
    strom_broker: StromCluster, tmp_path: Path
) -> None:
    records, partitions, batch = 300, 3, 5
    bootstrap = strom_broker.bootstrap_servers
    source, sink = unique_topic("ctp-in"), unique_topic("ctp-out")
    create_topic(bootstrap, source, partitions)
    create_topic(bootstrap, sink, partitions)
    inputs = produce_inputs(bootstrap, source, records, partitions)
    group, txn_id = "ctp-" + uuid.uuid4().hex[:6], "ctp-app-" + uuid.uuid4().hex[:6]
    args = ("transform", bootstrap, source, sink, group, txn_id, str(batch))
    with seeded() as rng:
        # Each phase once, in a random order, in one of an incarnation's first three
        # transactions (at most 3 * batch records each: input is left for the last one);
        # and once from outside, soon after a start (joining the group, fetching offsets).
        kills: list[str | float] = [*rng.sample(KILL_PHASES, len(KILL_PHASES))]
        kills.insert(rng.randrange(len(kills) + 1), rng.uniform(0.0, 0.3))
        assert len(kills) * 3 * batch < records
        for kill in kills:
            if isinstance(kill, float):
                with client_process(tmp_path, *args, "-") as app:
                    app.wait_for(lambda lines: "ready" in lines, "start")
                    time.sleep(kill)
                continue
            delay_ms = rng.uniform(0.0, 15.0) if kill == "commit" else 0.0
            with client_process(tmp_path, *args, f"{rng.randrange(3)}:{kill}:{delay_ms}") as app:
                app.wait_for_kill(f"kill itself at {kill}")
        with client_process(tmp_path, *args, "-") as app:
            ends = {(source, p): len(inputs[p]) for p in range(partitions)}

            def done() -> bool:
                app.check_alive()
                return strom_broker.committed(group) == ends

            strom_broker.wait_until(done, WAIT_S, "the app to commit every input offset")
        got = read_values(bootstrap, sink, partitions, committed=True, want=records)
        for p in range(partitions):
            want = [b"%d:%d:%s" % (p, o, v.upper()) for o, v in enumerate(inputs[p])]
            assert got[p] == want, _difference(p, want, got[p])
        # The kills at "flushed" and "offsets" left records of aborted transactions.
        written = read_values(bootstrap, sink, partitions, committed=False)
        assert sum(map(len, written.values())) >= records + 2


def _difference(partition: int, want: list[bytes], got: list[bytes]) -> str:
    duplicated = sorted({v for v in got if got.count(v) > 1})
    missing = [v for v in want if v not in got]
    return (
        f"output partition {partition}: {len(got)} records for {len(want)} inputs; "
        f"duplicated {duplicated[:5]}, missing {missing[:5]}"
    )


# --- 2. the coordinator's timeout aborts a killed producer's transaction -------------


def describe(bootstrap: str, txn_id: str) -> TxnDescription:
    return run(bootstrap, CLIENT_TIMEOUT_S, lambda c: describe_transaction(c, txn_id))


def test_the_coordinator_aborts_the_transaction_of_a_producer_killed_with_kill_9(
    strom_broker: StromCluster, tmp_path: Path
) -> None:
    # The coordinator looks for timed-out transactions this often in a test cluster.
    cleanup = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    assert strom_broker.config[cleanup] == "500"
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("killed-txn")
    create_topic(bootstrap, topic, 2)
    txn_id = "killed-" + uuid.uuid4().hex[:6]
    with client_process(tmp_path, "hang", bootstrap, topic, txn_id, "2000") as producer:
        producer.wait_for(lambda lines: "flushed" in lines, "write its records")
        producer.kill()
    killed = describe(bootstrap, txn_id)
    with txn_producer(bootstrap) as other:  # another id: it does not touch the killed one's
        other.begin_transaction()
        for p in (0, 1):
            other.produce(topic, b"later-%d" % p, partition=p)
        other.commit_transaction(TXN_TIMEOUT_S)

    with confluent_consumer(bootstrap, **{"isolation.level": "read_committed"}) as consumer:
        stable = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), CLIENT_TIMEOUT_S)[1]
            for p in (0, 1)
        ]
    still_open = describe(bootstrap, txn_id)
    if killed.state == "Ongoing":
        assert killed.partitions == ((topic, 0), (topic, 1))
    if still_open.state == "Ongoing":
        # Not aborted yet when the offsets were read: its first records hold them back.
        assert stable == [0, 0], "a read_committed reader's end is the open transaction's start"
    # Else the timeout struck before the reads (a stalled machine); the rest still holds.

    got = read_values(bootstrap, topic, 2, committed=True, want=2)
    assert got == {0: [b"later-0"], 1: [b"later-1"]}
    ended = describe(bootstrap, txn_id)
    assert (ended.state, ended.producer_id) == ("CompleteAbort", killed.producer_id), ended
    if killed.state == "Ongoing":
        assert ended.producer_epoch > killed.producer_epoch, "the killed producer is fenced"
    everything = read_values(bootstrap, topic, 2, committed=False)
    assert everything == {p: [b"killed-%d" % p, b"later-%d" % p] for p in (0, 1)}


# --- 3. the coordinator killed during commits, three nodes -----------------------------

TXN_PARTITIONS = 1
COORDINATOR_KILL_CONFIG = {"transaction.state.log.num.partitions": TXN_PARTITIONS}


class Outcomes:
    """What each transaction's end returned to the producer, by transaction number."""

    def __init__(self) -> None:
        self.committed: list[int] = []
        self.aborted: list[int] = []  # commit failed, then abort_transaction succeeded
        self.unknown: list[int] = []  # commit failed, then the producer was fenced/fatal
        self.errors: list[str] = []  # what the client raised on the way
        self.failure: BaseException | None = None  # what ended the producing thread
        self.in_commit = threading.Event()
        self.stop = threading.Event()

    def ended(self) -> int:
        return len(self.committed) + len(self.aborted) + len(self.unknown)


def transact(bootstrap: str, txn_id: str, topic: str, partitions: int, out: Outcomes) -> None:
    """One record per partition per transaction, until `out.stop`; the outcome of each.
    A fatal error ends the producer; a new one with the same id takes over."""
    n = 0
    while not out.stop.is_set():
        with txn_producer(bootstrap, txn_id, **{"linger.ms": 0}) as producer:
            while not out.stop.is_set():
                producer.begin_transaction()
                for p in range(partitions):
                    producer.produce(topic, b"t%d-p%d" % (n, p), partition=p)
                assert producer.flush(TXN_TIMEOUT_S) == 0
                out.in_commit.set()
                outcome = end_transaction(producer, out)
                out.in_commit.clear()
                {"committed": out.committed, "aborted": out.aborted, "unknown": out.unknown}[
                    outcome
                ].append(n)
                n += 1
                if outcome == "unknown":
                    break


def end_transaction(producer: Producer, out: Outcomes) -> str:
    while True:
        try:
            producer.commit_transaction(TXN_TIMEOUT_S)
            return "committed"
        except KafkaException as exc:
            error = exc.args[0]
            out.errors.append(f"commit: {error}")
            if error.retriable():
                continue
            if not error.txn_requires_abort():
                return "unknown"
        try:
            producer.abort_transaction(TXN_TIMEOUT_S)
            return "aborted"
        except KafkaException as exc:
            out.errors.append(f"abort: {exc.args[0]}")
            return "unknown"


def check_transactions(
    bootstrap: str, topic: str, partitions: int, out: Outcomes, when: str
) -> None:
    want = len(out.committed) * partitions
    got = read_values(bootstrap, topic, partitions, committed=True, want=want)
    where: dict[int, list[int]] = {}
    for p in range(partitions):
        numbers = [int(v.split(b"-")[0][1:]) for v in got[p]]
        assert numbers == sorted(set(numbers)), f"{when}: partition {p} out of order: {numbers}"
        for n in numbers:
            where.setdefault(n, []).append(p)
    summary = f"{when}: outcomes {vars(out)}, found {where}"
    for n in out.committed:
        assert where.get(n) == list(range(partitions)), f"committed txn {n} not whole; {summary}"
    for n in out.aborted:
        assert n not in where, f"aborted txn {n} visible; {summary}"
    for n in out.unknown:
        assert where.get(n, list(range(partitions))) == list(range(partitions)), (
            f"txn {n} ended in error and is there in part; {summary}"
        )
    assert set(where) <= {*out.committed, *out.unknown}, summary


def test_every_acknowledged_commit_survives_the_coordinator_killed_during_commits(
    tmp_path: Path,
) -> None:
    partitions = 3
    txn_id = "coordinator-kill-" + uuid.uuid4().hex[:6]
    with (
        seeded() as rng,
        StromCluster(3, processes=True, config=COORDINATOR_KILL_CONFIG) as cluster,
    ):
        bootstrap = cluster.bootstrap_servers
        topic = unique_topic("coord-kill")
        cluster.create_topic(topic, partitions, 3, config={"min.insync.replicas": 2})
        leaders = {cluster.leader(topic, p) for p in range(partitions)}
        assert leaders == set(cluster.node_ids), f"data leaders {leaders}: one per broker"
        out = Outcomes()
        worker = threading.Thread(
            target=_recording_failure(transact, out),
            args=(bootstrap, txn_id, topic, partitions, out),
        )
        worker.start()
        try:
            cluster.wait_until(lambda: len(out.committed) >= 2, WAIT_S, "the first commits")
            coordinator = describe(bootstrap, txn_id).coordinator.node_id
            state_partition = partition_for(txn_id, TXN_PARTITIONS)
            assert cluster.leader(TRANSACTION_STATE_TOPIC, state_partition) == coordinator
            assert len(cluster.isr(TRANSACTION_STATE_TOPIC, state_partition)) == 3
            before = len(out.committed) + rng.randrange(3)
            cluster.wait_until(lambda: len(out.committed) >= before, WAIT_S, "more commits")
            assert out.in_commit.wait(WAIT_S), "no commit under way"
            time.sleep(rng.uniform(0.0, 0.02))  # somewhere in the commit
            cluster.crash_node(coordinator)
            after = out.ended() + 4
            cluster.wait_until(
                lambda: out.ended() >= after or not worker.is_alive(),
                WAIT_S,
                "transactions after the kill",
            )
        finally:
            out.stop.set()
            worker.join(WAIT_S * 2)
        assert not worker.is_alive(), "the producer did not stop"
        assert out.failure is None, f"the producer failed: {out.failure!r}; {vars(out)}"
        assert len(out.committed) >= before, vars(out)
        check_transactions(bootstrap, topic, partitions, out, "after the kill")

        cluster.start_node(coordinator)
        for p in range(partitions):
            cluster.wait_until(
                lambda p=p: coordinator in cluster.isr(topic, p), WAIT_S, "the ISR again"
            )
            cluster.move_leader(topic, p, coordinator)  # its copy serves the reads
        check_transactions(bootstrap, topic, partitions, out, "read from the restarted node")
        # It coordinates the id again, from what it had and what it caught up on.
        cluster.move_leader(TRANSACTION_STATE_TOPIC, state_partition, coordinator)
        loaded = describe(bootstrap, txn_id)
        assert loaded.coordinator.node_id == coordinator
        last = max([*out.committed, *out.aborted, *out.unknown])
        if last in out.committed:
            assert loaded.state == "CompleteCommit", loaded


def _recording_failure(work: Callable[..., None], out: Outcomes) -> Callable[..., None]:
    def run_it(*args: object) -> None:
        try:
            work(*args)
        except BaseException as exc:
            out.failure = exc

    return run_it
