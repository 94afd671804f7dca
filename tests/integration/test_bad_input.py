"""Malformed and hostile input over real sockets: the broker refuses it and keeps serving.

One broker serves the whole module. After every case a fresh connection must still get
an ApiVersions answer, a librdkafka client must still be served, and the target topic's
watermarks must not have moved (nothing was appended).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import crc32c
import kafka_wire as wire
import pytest
from broker import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode

from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.codec import decode_response
from strom.protocol.records import Compression, encode_batch

MAX_REQUEST_BYTES = 1 << 20
IDLE_TIMEOUT_MS = 3000
TOPIC = "victim"
GOOD_TOPIC = "good"
PARTITIONS = 2
SEEDED_RECORDS = 5
MAX_MESSAGE_BYTES = 4096
CLOSE_TIMEOUT_S = 5.0


@dataclass(slots=True)
class Target:
    broker: BrokerProcess
    admin: AdminClient

    @property
    def port(self) -> int:
        return self.broker.port

    def watermarks(self) -> list[tuple[int, int]]:
        """(log start, high watermark) of each partition, by ListOffsets on a new connection."""
        return [
            (
                wire.list_offset(self.port, TOPIC, p, wire.EARLIEST_TIMESTAMP),
                wire.list_offset(self.port, TOPIC, p, wire.LATEST_TIMESTAMP),
            )
            for p in range(PARTITIONS)
        ]

    def rss_kib(self) -> int:
        assert self.broker.process is not None
        status = Path(f"/proc/{self.broker.process.pid}/status").read_text()
        line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
        return int(line.split()[1])

    def assert_serving(self, expected_watermarks: list[tuple[int, int]]) -> None:
        """A new connection is answered, a real client is served, nothing was appended."""
        assert self.broker.process is not None and self.broker.process.poll() is None
        response = wire.api_versions(self.port)
        assert response.error_code == ErrorCode.none
        assert TOPIC in self.admin.list_topics(timeout=10).topics
        assert self.watermarks() == expected_watermarks
        self.assert_no_bug_logged()

    def assert_no_bug_logged(self) -> None:
        log = self.broker.read_log()
        assert "Traceback" not in log and "bug while handling" not in log, log[-5000:]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("bad-input") / "data",
        extra=[
            "--set",
            f"socket.request.max.bytes={MAX_REQUEST_BYTES}",
            "--set",
            f"connections.max.idle.ms={IDLE_TIMEOUT_MS}",
        ],
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        futures = admin.create_topics(
            [
                NewTopic(
                    TOPIC, PARTITIONS, 1, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)}
                ),
                NewTopic(GOOD_TOPIC, 1, 1),
            ],
            operation_timeout=10,
        )
        for future in futures.values():
            future.result(timeout=10)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for i in range(SEEDED_RECORDS):
            producer.produce(TOPIC, value=f"seed-{i}".encode(), partition=i % PARTITIONS)
        assert producer.flush(10) == 0
        yield Target(broker, admin)
    finally:
        broker.kill()


def valid_batch(value: bytes = b"should-not-be-stored") -> bytearray:
    return bytearray(encode_batch([(b"key", value, [])], base_timestamp_ms=int(time.time() * 1000)))


def recrc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def flexible_header(api_key: int, api_version: int, correlation_id: int = 7) -> bytes:
    """Request header v2: the v1 fields plus an empty tagged-field section."""
    return wire.header(api_key, api_version, correlation_id) + b"\x00"


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --- connection-level garbage: the broker closes the connection ------------------------


def _huge_size(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">i", 0x7FFFFFFF))


def _size_just_above_limit(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"\x00" * 64)


def _negative_size(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">i", -1) + b"\x00" * 16)


def _min_negative_size(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">i", -(2**31)))


def _zero_size(sock: socket.socket) -> None:
    sock.sendall(b"\x00\x00\x00\x00")


def _size_below_header(sock: socket.socket) -> None:
    sock.sendall(wire.frame(b"\x00\x12\x00"))


def _truncated_request(sock: socket.socket) -> None:
    sock.sendall(struct.pack(">i", 100) + wire.header(18, 3, 1)[:10])
    sock.shutdown(socket.SHUT_WR)


def _garbled_after_header(sock: socket.socket) -> None:
    sock.sendall(wire.frame(flexible_header(3, 12) + b"\xff" * 24))


def _garbled_produce_body(sock: socket.socket) -> None:
    sock.sendall(wire.frame(flexible_header(0, 9) + bytes(range(200, 256)) * 3))


def _huge_array_count(sock: socket.socket) -> None:
    # Metadata v12: topics is a compact array (length + 1 as an unsigned varint).
    sock.sendall(wire.frame(flexible_header(3, 12) + uvarint(2**31 + 1) + b"\x00" * 8))


def _huge_string_length(sock: socket.socket) -> None:
    # Metadata v1: topics array of one string that claims 32767 bytes.
    sock.sendall(wire.frame(wire.header(3, 1, 3) + struct.pack(">ih", 1, 32767) + b"ab"))


def _unknown_api_key(sock: socket.socket) -> None:
    sock.sendall(wire.frame(wire.header(9999, 0, 5) + b"\x00" * 8))


def _unsupported_metadata_version(sock: socket.socket) -> None:
    sock.sendall(wire.frame(flexible_header(3, 99) + b"\x00" * 8))


def _unsupported_produce_version(sock: socket.socket) -> None:
    # Produce v2 carries magic 0/1 message sets; strom serves v3 and later.
    sock.sendall(wire.frame(wire.header(0, 2, 5) + b"\x00" * 16))


CLOSING_CASES: dict[str, Callable[[socket.socket], None]] = {
    "huge-size": _huge_size,
    "size-just-above-limit": _size_just_above_limit,
    "negative-size": _negative_size,
    "min-negative-size": _min_negative_size,
    "zero-size": _zero_size,
    "size-below-header": _size_below_header,
    "truncated-request": _truncated_request,
    "garbled-after-header": _garbled_after_header,
    "garbled-produce-body": _garbled_produce_body,
    "huge-array-count": _huge_array_count,
    "huge-string-length": _huge_string_length,
    "unknown-api-key": _unknown_api_key,
    "metadata-v99": _unsupported_metadata_version,
    "produce-v2": _unsupported_produce_version,
}


def run_closing_case(target: Target, send: Callable[[socket.socket], None]) -> None:
    with wire.connect(target.port) as sock:
        send(sock)
        started = time.monotonic()
        assert wire.wait_closed(sock, CLOSE_TIMEOUT_S), "the broker kept the connection open"
        assert time.monotonic() - started < CLOSE_TIMEOUT_S


@pytest.mark.parametrize("case", CLOSING_CASES)
def test_malformed_frame_closes_connection(target: Target, case: str) -> None:
    before = target.watermarks()
    rss_before = target.rss_kib()
    run_closing_case(target, CLOSING_CASES[case])
    target.assert_serving(before)
    # Nothing the request claimed (2 GiB, 2**31 elements) was allocated.
    assert target.rss_kib() - rss_before < 64 * 1024


def test_partial_frame_is_closed_after_idle_timeout(target: Target) -> None:
    """A client that sends a size and part of a request, then stalls, is disconnected."""
    before = target.watermarks()
    with wire.connect(target.port) as sock:
        sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)
        assert wire.wait_closed(sock, 4 * IDLE_TIMEOUT_MS / 1000)
    target.assert_serving(before)


def test_api_versions_unsupported_version_answers_v0(target: Target) -> None:
    with wire.connect(target.port) as sock:
        sock.sendall(wire.frame(flexible_header(18, 99, correlation_id=4242) + b"\x00" * 4))
        correlation_id, body = decode_response(18, 0, wire.read_frame(sock))
        assert correlation_id == 4242
        assert isinstance(body, ApiVersionsResponse)
        assert body.error_code == ErrorCode.unsupported_version
        advertised = {int(k.api_key): (k.min_version, k.max_version) for k in body.api_keys}
        assert advertised == {
            int(key): (r.min_version, r.max_version) for key, r in SUPPORTED_APIS.items()
        }
        # The connection stays usable: the client retries at a version it found.
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        retry = wire.call(
            sock,
            ApiVersionsRequest(client_software_name="retry", client_software_version="1"),
            correlation_id=4243,
        )
        assert retry.error_code == ErrorCode.none
    target.assert_serving(target.watermarks())


# --- produce requests with bad records: an error code per partition ------------------


def _wrong_crc() -> tuple[int, bytes | None, int]:
    batch = valid_batch()
    batch[-1] ^= 0xFF
    return 0, bytes(batch), -1


def _magic_1() -> tuple[int, bytes | None, int]:
    batch = valid_batch()
    batch[16] = 1
    return 0, bytes(batch), -1


def _magic_1_recrc() -> tuple[int, bytes | None, int]:
    batch = valid_batch()
    batch[16] = 1
    return 0, recrc(batch), -1


def _truncated_batch() -> tuple[int, bytes | None, int]:
    batch = valid_batch()
    return 0, bytes(batch[: len(batch) // 2]), -1


def _header_only() -> tuple[int, bytes | None, int]:
    return 0, bytes(valid_batch()[:40]), -1


def _count_mismatch() -> tuple[int, bytes | None, int]:
    # Claims two records (and offset delta 1) but holds one; the CRC is right.
    batch = valid_batch()
    struct.pack_into(">i", batch, 23, 1)
    struct.pack_into(">i", batch, 57, 2)
    return 1, recrc(batch), -1


def _count_vs_delta_mismatch() -> tuple[int, bytes | None, int]:
    batch = valid_batch()
    struct.pack_into(">i", batch, 57, 3)
    return 1, recrc(batch), -1


def _record_length_lies() -> tuple[int, bytes | None, int]:
    # The record's length varint (zigzag) claims more bytes than the batch holds.
    batch = valid_batch()
    batch[61] = 0x7E
    return 0, recrc(batch), -1


def _valid_then_garbage() -> tuple[int, bytes | None, int]:
    # A whole valid batch followed by a torn one: nothing of the request is stored.
    return 1, bytes(valid_batch()) + bytes(valid_batch())[:30], -1


def _zero_records() -> tuple[int, bytes | None, int]:
    return 0, encode_batch([], base_timestamp_ms=int(time.time() * 1000)), -1


def _control_batch() -> tuple[int, bytes | None, int]:
    batch = encode_batch(
        [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])],
        base_timestamp_ms=int(time.time() * 1000),
        is_control=True,
    )
    return 0, batch, -1


def _transactional_without_transaction() -> tuple[int, bytes | None, int]:
    batch = encode_batch(
        [(None, b"txn", [])],
        base_timestamp_ms=int(time.time() * 1000),
        producer_id=4242,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    return 0, batch, -1


def _too_large() -> tuple[int, bytes | None, int]:
    return 1, bytes(valid_batch(b"x" * (MAX_MESSAGE_BYTES + 1))), -1


def _null_records() -> tuple[int, bytes | None, int]:
    return 0, None, -1


def _empty_records() -> tuple[int, bytes | None, int]:
    return 0, b"", -1


def _bad_acks() -> tuple[int, bytes | None, int]:
    return 0, bytes(valid_batch()), 5


# name -> (build (partition, records, acks), acceptable error codes)
PRODUCE_CASES: dict[str, tuple[Callable[[], tuple[int, bytes | None, int]], set[ErrorCode]]] = {
    "wrong-crc": (_wrong_crc, {ErrorCode.corrupt_message}),
    "magic-1": (
        _magic_1,
        {ErrorCode.unsupported_for_message_format, ErrorCode.corrupt_message},
    ),
    "magic-1-crc-ok": (
        _magic_1_recrc,
        {ErrorCode.unsupported_for_message_format, ErrorCode.corrupt_message},
    ),
    "truncated-batch": (_truncated_batch, {ErrorCode.corrupt_message}),
    "header-only": (_header_only, {ErrorCode.corrupt_message}),
    "count-mismatch": (_count_mismatch, {ErrorCode.invalid_record}),
    "count-vs-offset-delta": (_count_vs_delta_mismatch, {ErrorCode.invalid_record}),
    "record-length-lies": (_record_length_lies, {ErrorCode.invalid_record}),
    "valid-then-torn": (_valid_then_garbage, {ErrorCode.corrupt_message}),
    "zero-records": (_zero_records, {ErrorCode.invalid_record}),
    "control-batch": (_control_batch, {ErrorCode.invalid_record}),
    "transactional-without-transaction": (
        _transactional_without_transaction,
        {ErrorCode.transactional_id_authorization_failed, ErrorCode.invalid_record},
    ),
    "too-large": (_too_large, {ErrorCode.message_too_large}),
    "null-records": (_null_records, {ErrorCode.corrupt_message}),
    "empty-records": (_empty_records, {ErrorCode.corrupt_message}),
    "acks-5": (_bad_acks, {ErrorCode.invalid_required_acks}),
}


def run_produce_case(target: Target, name: str) -> None:
    build, expected = PRODUCE_CASES[name]
    partition, records, acks = build()
    response = wire.produce(target.port, TOPIC, partition, records, acks=acks)
    assert response.error_code in expected, (name, response)
    assert response.base_offset == -1


@pytest.mark.parametrize("case", PRODUCE_CASES)
def test_bad_produce_is_refused(target: Target, case: str) -> None:
    before = target.watermarks()
    run_produce_case(target, case)
    target.assert_serving(before)


def test_undecodable_compressed_batch_is_refused(target: Target) -> None:
    batch = bytearray(
        encode_batch(
            [(b"k", b"v", [])],
            base_timestamp_ms=int(time.time() * 1000),
            compression=Compression.GZIP,
        )
    )
    batch[61:] = b"\x1f\x8b" + b"garbage!" * 4
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    # A topic of its own: if the batch is stored, it poisons no other test.
    for future in target.admin.create_topics([NewTopic("poison", 1, 1)]).values():
        future.result(timeout=10)
    response = wire.produce(target.port, "poison", 0, recrc(batch))
    assert response.error_code == ErrorCode.corrupt_message


@pytest.mark.parametrize(("topic", "partition"), [(TOPIC, PARTITIONS), (TOPIC, -1), ("nope", 0)])
def test_produce_to_unknown_partition(target: Target, topic: str, partition: int) -> None:
    before = target.watermarks()
    response = wire.produce(target.port, topic, partition, bytes(valid_batch()))
    assert response.error_code == ErrorCode.unknown_topic_or_partition
    target.assert_serving(before)
    assert "nope" not in target.admin.list_topics(timeout=10).topics


# --- all of it while a well-behaved client keeps working --------------------------------


def test_bad_input_interleaved_with_good_clients(target: Target) -> None:
    before = target.watermarks()
    good_high = wire.list_offset(target.port, GOOD_TOPIC, 0, wire.LATEST_TIMESTAMP)
    producer = Producer(
        {
            "bootstrap.servers": target.broker.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "log_level": 0,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": target.broker.bootstrap,
            "group.id": "interleaved",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(GOOD_TOPIC, 0, good_high)])
    delivered: list[bytes] = []
    failures: list[str] = []
    received: list[bytes] = []
    stop = threading.Event()

    def on_delivery(err: KafkaError | None, message: object) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            delivered.append(message.value())  # type: ignore[attr-defined]

    def produce_loop() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(GOOD_TOPIC, value=b"good-%06d" % i, partition=0, callback=on_delivery)
            i += 1
            producer.poll(0.002)
        producer.flush(20)

    def consume_loop() -> None:
        drain_deadline = None
        while not (produced.is_set() and len(received) >= len(delivered)):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                received.append(message.value())
            if produced.is_set():
                drain_deadline = drain_deadline or time.monotonic() + 20
                if time.monotonic() > drain_deadline:
                    return

    produced = threading.Event()
    producer_thread = threading.Thread(target=produce_loop)
    consumer_thread = threading.Thread(target=consume_loop)
    producer_thread.start()
    consumer_thread.start()
    try:
        rounds = 0
        deadline = time.monotonic() + 30
        while rounds < 3 or (len(delivered) < 500 and time.monotonic() < deadline):
            rounds += 1
            for case in CLOSING_CASES.values():
                run_closing_case(target, case)
            for name in PRODUCE_CASES:
                run_produce_case(target, name)
            target.assert_serving(before)
    finally:
        stop.set()
        producer_thread.join(30)
        produced.set()
        consumer_thread.join(30)
        consumer.close()
    assert not failures
    assert len(delivered) >= 500
    assert received == delivered
    assert delivered == sorted(delivered)
    target.assert_serving(before)


# --- random bytes -------------------------------------------------------------------------

_SERVED_HEADERS = [
    (int(key), version)
    for key, versions in SUPPORTED_APIS.items()
    for version in range(versions.min_version, versions.max_version + 1)
]
# Requests whose answer may legitimately take long (a fetch waiting for data, a JoinGroup
# or SyncGroup waiting for the rest of its group) or never come (an acks=0 produce).
_MAY_STAY_SILENT = {
    int(ApiKey.PRODUCE),
    int(ApiKey.FETCH),
    int(ApiKey.JOIN_GROUP),
    int(ApiKey.SYNC_GROUP),
}


def _payloads() -> st.SearchStrategy[bytes]:
    served = st.sampled_from(_SERVED_HEADERS).flatmap(
        lambda kv: st.tuples(
            st.just(kv),
            st.integers(-(2**31), 2**31 - 1),
            st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_.0123456789", max_size=12).map(
                str.encode
            ),
            st.binary(max_size=300),
        ).map(
            lambda t: (
                struct.pack(">hhi", t[0][0], t[0][1], t[1])
                + struct.pack(">h", len(t[2]))
                + t[2]
                + t[3]
            )
        )
    )
    return st.one_of(st.binary(max_size=300), served)


@settings(
    # STROM_FUZZ_EXAMPLES=5000 for a longer hunt.
    max_examples=int(os.environ.get("STROM_FUZZ_EXAMPLES", "250")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(payload=_payloads())
def test_random_bytes_never_break_the_broker(target: Target, payload: bytes) -> None:
    with wire.connect(target.port) as sock:
        sock.sendall(wire.frame(payload))
        # Half-close: the broker answers what it read, then sees the end of the stream.
        sock.shutdown(socket.SHUT_WR)
        answered = False
        sock.settimeout(3.0)
        try:
            while True:
                wire.read_frame(sock)
                answered = True
        except wire.Closed:
            closed = True
        except TimeoutError:
            closed = False
        api_key = struct.unpack_from(">h", payload)[0] if len(payload) >= 2 else None
        assert answered or closed or api_key in _MAY_STAY_SILENT, payload
    response = wire.api_versions(target.port)
    assert response.error_code == ErrorCode.none
    assert target.broker.process is not None and target.broker.process.poll() is None
    target.assert_no_bug_logged()
