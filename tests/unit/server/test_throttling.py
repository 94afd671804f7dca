"""How a connection throttles a client its quotas say is over (server/throttling.py):
`TimedCall` adds up the steps a handler ran, a throttled answer carries its
`throttle_time_ms`, the connection reads nothing more until the wait is over, and an old
client's answer is held back instead. The Connection runs in process on a StreamReader
fed by hand and a recording writer; its waits are recorded, not slept."""

from __future__ import annotations

import asyncio
import itertools
import struct
from datetime import timedelta
from typing import Any

import pytest
from server_harness import RecordingWriter, request, run

from strom.config import load_config
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, decode_response, encode_request
from strom.server import connection as connection_module
from strom.server import throttling
from strom.server.connection import Connection, api_versions_body
from strom.server.throttling import (
    ClientQuotaThrottle,
    RequestUsage,
    TimedCall,
    client_throttles,
    with_throttle_time,
)

# --- TimedCall ------------------------------------------------------------------------------


def test_a_timed_call_adds_up_the_steps_it_ran_not_the_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = itertools.count(0.0, 0.5)  # each reading half a second after the last
    monkeypatch.setattr(throttling.time, "perf_counter", lambda: next(clock))

    async def handler(released: asyncio.Event) -> str:
        await asyncio.sleep(0)
        await released.wait()
        return "answer"

    async def scenario() -> None:
        released = asyncio.Event()
        call = TimedCall(handler(released))
        task = asyncio.ensure_future(call)
        for _ in range(5):
            await asyncio.sleep(0)
        released.set()
        assert await task == "answer"
        # Three steps: to the sleep(0), to the wait, to the return; 0.5 s each.
        assert call.spent_s == 1.5

    run(scenario())


def test_a_timed_call_passes_on_errors_and_cancellation() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("bad")

    async def waiting(started: asyncio.Event) -> None:
        started.set()
        await asyncio.Event().wait()

    async def scenario() -> None:
        with pytest.raises(ValueError, match="bad"):
            await TimedCall(failing())
        started = asyncio.Event()
        task = asyncio.ensure_future(TimedCall(waiting(started)))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())


# --- which clients wait themselves; the field ---------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "waits"),
    [
        (ApiKey.PRODUCE, 5, False),
        (ApiKey.PRODUCE, 6, True),
        (ApiKey.FETCH, 7, False),
        (ApiKey.FETCH, 8, True),
        (ApiKey.API_VERSIONS, 1, False),
        (ApiKey.API_VERSIONS, 3, True),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, True),
        (ApiKey.DESCRIBE_CLUSTER, 1, False),  # Kafka's default: never
    ],
)
def test_which_clients_wait_out_a_throttle_themselves(
    api_key: ApiKey, version: int, waits: bool
) -> None:
    assert client_throttles(api_key, version) is waits


def test_the_throttle_time_goes_into_the_answer_where_it_has_the_field() -> None:
    body = with_throttle_time(api_versions_body(3), 250)
    assert body.throttle_time == timedelta(milliseconds=250)
    v0 = api_versions_body(0)  # ApiVersions v0 has no throttle_time_ms
    assert with_throttle_time(v0, 250) is v0


# --- a connection with a quota ------------------------------------------------------------


class _Quota:
    """Answers each call with the next of `waits_ms` (two calls a request: when it is
    read, when it is answered); keeps what it was told."""

    def __init__(self, *waits_ms: int) -> None:
        self.waits_ms = list(waits_ms)
        self.usages: list[RequestUsage] = []

    def enforced(self) -> bool:
        return True

    def throttle_ms(self, usage: RequestUsage) -> int:
        self.usages.append(usage)
        return self.waits_ms.pop(0)


def _api_versions(version: int, correlation_id: int) -> bytes:
    asked = request(
        ApiKey.API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"}
    )
    return encode_request(ApiKey.API_VERSIONS, version, correlation_id, asked.body)


def _frames(written: bytes) -> list[bytes]:
    frames, at = [], 0
    while at + 4 <= len(written):
        (size,) = struct.unpack_from(">i", written, at)
        frames.append(written[at + 4 : at + 4 + size])
        at += 4 + size
    return frames


def _answers(written: bytes, version: int) -> list[Any]:
    return [decode_response(ApiKey.API_VERSIONS, version, f)[1] for f in _frames(written)]


def _serve(
    monkeypatch: pytest.MonkeyPatch,
    quota: _Quota,
    *frames: bytes,
    observed: list[tuple[Any, ...]] | None = None,
    handler_s: float = 0.0,
) -> tuple[bytes, list[tuple[str, float]]]:
    """Serve `frames` to the end with `quota`: what was written, and in order each request
    dispatched (its correlation id) and each throttle wait (recorded, not slept). Each
    handler takes `handler_s` on the clock; the request metrics go to `observed`."""
    events: list[tuple[str, float]] = []
    skipped = [0.0]  # the time the waits and the handlers would have taken

    async def dispatch(asked: Request) -> Any:
        events.append(("dispatch", asked.correlation_id))
        skipped[0] += handler_s
        return api_versions_body(asked.api_version)

    real_clock = connection_module.time.perf_counter

    async def recorded_wait(seconds: float) -> None:
        events.append(("wait", round(seconds, 1)))
        skipped[0] += seconds

    monkeypatch.setattr(connection_module, "_throttle_wait", recorded_wait)
    monkeypatch.setattr(connection_module.time, "perf_counter", lambda: real_clock() + skipped[0])

    async def scenario() -> bytes:
        reader = asyncio.StreamReader()
        writer = RecordingWriter()
        connection = Connection(
            reader,
            writer,  # type: ignore[arg-type]
            dispatch,
            max_request_bytes=1 << 20,
            idle_timeout_s=30,
            node_id=1,
            principal="User:alice",
            throttle=quota,
            observe=None if observed is None else lambda *times: observed.append(times),
        )
        serving = asyncio.ensure_future(connection.serve())
        for answered, frame in enumerate(frames):  # each once the last one is answered
            for _ in range(1000):
                if len(_frames(bytes(writer.written))) >= answered:
                    break
                await asyncio.sleep(0)
            reader.feed_data(frame)
        reader.feed_eof()
        await asyncio.wait_for(serving, 5)
        return bytes(writer.written)

    return run(scenario()), events


def test_a_throttled_answer_says_so_and_the_connection_waits_before_reading_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quota = _Quota(0, 400, 0, 0)
    first, second = _api_versions(3, 1), _api_versions(3, 2)
    written, events = _serve(monkeypatch, quota, first, second)
    answers = _answers(written, 3)
    assert [a.throttle_time for a in answers] == [timedelta(milliseconds=400), timedelta(0)]
    # The second request was read only after the wait.
    assert events == [("dispatch", 1), ("wait", 0.4), ("dispatch", 2)]
    read, answered = quota.usages[:2]
    assert (read.principal, read.client_id, read.api_key) == (
        "User:alice",
        "strom",
        ApiKey.API_VERSIONS,
    )
    assert (read.request_bytes, read.response_bytes, read.handler_s) == (len(first) - 4, 0, 0)
    assert answered.request_bytes == 0
    assert answered.response_bytes > 0 and answered.handler_s >= 0


def test_a_throttled_request_is_timed_for_the_metrics_as_any_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    observed: list[tuple[Any, ...]] = []
    quota = _Quota(0, 400, 0, 0)
    _serve(monkeypatch, quota, _api_versions(1, 1), observed=observed, handler_s=0.25)
    [(api, read_at, started_at, handled_at, dequeued_at, sent_at)] = observed
    assert api == "API_VERSIONS"
    assert read_at <= started_at
    assert handled_at - started_at >= 0.25  # the handler's time, not nothing
    # An old client's answer is held for its wait: the metrics count it as queued.
    assert dequeued_at - handled_at >= 0.4
    assert sent_at >= dequeued_at


def test_what_a_request_brings_in_mutes_the_connection_before_the_next_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quota = _Quota(300, 0, 0, 0)  # over the quota as soon as the first request is read
    written, events = _serve(monkeypatch, quota, _api_versions(3, 1), _api_versions(3, 2))
    # The mute is checked once a request is in: the second waits it out before it is
    # served, however early it arrived.
    assert events == [("dispatch", 1), ("wait", 0.3), ("dispatch", 2)]
    assert [a.throttle_time for a in _answers(written, 3)] == [
        timedelta(milliseconds=300),
        timedelta(0),
    ]


def test_an_old_clients_answer_is_held_back_for_its_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written, events = _serve(monkeypatch, _Quota(0, 300), _api_versions(1, 1))
    (answer,) = _answers(written, 1)
    assert answer.throttle_time == timedelta(milliseconds=300)
    assert events == [("dispatch", 1), ("wait", 0.3)]  # held, as Kafka holds it


def test_the_windows_come_from_the_config() -> None:
    config = load_config(overrides=["quota.window.num=3", "quota.window.size.seconds=2"])
    assert config.quota_windows == (3, 2000)
    assert load_config().controller_quota_windows == (11, 1000)
    image = MetadataImage(client_quotas={QuotaEntity.user(None): {"producer_byte_rate": 100.0}})
    throttle = ClientQuotaThrottle(lambda: image, config.quota_windows, clock_ms=lambda: 0)
    used = RequestUsage("User:alice", "app", ApiKey.PRODUCE, 9, None, request_bytes=1_000)
    # 1,000 bytes measured over 2 windows of 2 s: 250 B/s, 1.5 times over 100 B/s.
    assert throttle.throttle_ms(used) == 6_000
