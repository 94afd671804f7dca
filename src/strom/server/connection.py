"""One client connection: frames in, responses out, in request order.

Requests are read as they come and each is handled in a task of its own, so a client
that pipelines (librdkafka does) keeps the broker busy while earlier requests wait for
their fsync; responses still leave in the order the requests arrived, as the protocol
requires. Handlers run their synchronous part (e.g. the append of a produce) in arrival
order, because tasks start in the order they are created.

Malformed input never reaches a handler: a bad size prefix or an undecodable request
closes this connection only, without allocating what the request claims.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any, cast

from kio.schema.errors import ErrorCode

from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.codec import (
    Request,
    RequestError,
    UnsupportedVersion,
    build_response,
    decode_request,
    encode_response,
)
from strom.protocol.responses.groups import ApiVersionsResponse
from strom.server.private import FIRST_PRIVATE_KEY, PrivatePayloadError
from strom.server.sasl_gate import SaslGate, SaslStep
from strom.server.throttling import (
    RequestThrottle,
    RequestUsage,
    TimedCall,
    client_throttles,
    with_throttle_time,
)

log = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Any | None]]
# (api_key, api_version, payload) -> response payload, or None for one-way APIs
PrivateHandler = Callable[[int, int, bytes], Awaitable[bytes | None]]
# (API key name, read, started, handled, dequeued, sent): perf_counter() readings
RequestObserver = Callable[[str, float, float, float, float, float], None]

# Requests read ahead of their answers. Kafka handles one request per connection at a
# time; strom overlaps a few so fsync waits pipeline, and bounds what a client that
# never reads its answers can make the broker hold.
_MAX_IN_FLIGHT = 16
_SIZE = struct.Struct(">i")
# What a client may send before it has authenticated on a SASL listener (Kafka's
# sasl.server.max.receive.size default): a hostile peer cannot make the broker hold more.
_MAX_SASL_BYTES = 512 * 1024
_PRIVATE_HEADER = struct.Struct(">hhi")


def api_versions_body(api_version: int, error: ErrorCode = ErrorCode.none) -> Any:
    response: ApiVersionsResponse = {
        "error_code": error,
        "api_keys": [
            {"api_key": int(key), "min_version": r.min_version, "max_version": r.max_version}
            for key, r in sorted(SUPPORTED_APIS.items())
        ],
        "throttle_time": 0,
    }
    return build_response(ApiKey.API_VERSIONS, api_version, response)


class _Timing:
    """When one request was read, started and handled (for the metrics)."""

    __slots__ = ("api_name", "handled_at", "read_at", "started_at")

    def __init__(self, api_name: str, read_at: float) -> None:
        self.api_name = api_name
        self.read_at = read_at
        self.started_at = read_at
        self.handled_at = read_at


_Answer = tuple["asyncio.Task[bytes | None]", _Timing | None]


class Connection:
    """Reading -> (draining: no new requests, in-flight ones answered) -> closed."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dispatch: Callable[[Request], Awaitable[Any | None]],
        *,
        max_request_bytes: int,
        idle_timeout_s: float,
        node_id: int,
        private: PrivateHandler | None = None,
        apis: Collection[ApiKey] = frozenset(SUPPORTED_APIS),
        observe: RequestObserver | None = None,
        listener: str = "",
        principal: str = "User:ANONYMOUS",
        sasl: SaslGate | None = None,
        node_peer: Callable[[str, str], bool] | None = None,
        throttle: RequestThrottle | None = None,
        connection_id: str = "",
    ) -> None:
        """`private` serves strom's own node-to-node APIs (server/private.py); a
        connection without it (a client listener) closes on any of them. `observe`
        hears the timings of every Kafka API request answered. `connection_id`:
        the broker's name for this connection, given to each request it reads."""
        self._observe = observe
        self.connection_id = connection_id
        self._reader = reader
        self._private = private
        self._node_peer = node_peer
        """Whether a principal at a host may use strom's node-to-node APIs (CLUSTER_ACTION
        on the cluster, with an authorizer); None: any may."""
        self._apis = apis
        self._writer = writer
        self._dispatch = dispatch
        self._max_request_bytes = max_request_bytes
        self._idle_timeout_s = idle_timeout_s
        self._node_id = node_id
        self._responses: asyncio.Queue[_Answer | None] = asyncio.Queue(_MAX_IN_FLIGHT)
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.host = f"/{peer[0]}" if isinstance(peer, tuple) else str(peer)
        self._draining = False
        self.listener = listener
        self.principal = principal
        self.last_active_s = time.perf_counter()
        """When the last request was read (max.connections closes the least recent)."""
        self._sasl = sasl
        """Until it has authenticated, a SASL listener's client may send only ApiVersions,
        SaslHandshake and SaslAuthenticate (sasl_gate.py)."""
        self._close_after_answer = False
        self._throttle = throttle
        """The client quotas this connection's requests count against (throttling.py)."""
        self._muted_until = 0.0
        """perf_counter() before which no request is read: a throttled client waits."""

    def abort(self) -> None:
        """Drop the connection at once, unsent answers included (a crash)."""
        self._draining = True
        cast(asyncio.Transport, self._writer.transport).abort()

    def drain(self) -> None:
        """Stop reading requests; the ones already read are still answered."""
        self._draining = True
        # Stop the transport first: bytes arriving after feed_eof() would trip asyncio.
        transport = cast(asyncio.Transport, self._writer.transport)
        if not transport.is_closing():
            transport.pause_reading()
        self._reader.feed_eof()

    async def serve(self) -> None:
        sender = asyncio.create_task(self._send_responses())
        try:
            try:
                await self._read_requests()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            except TimeoutError:
                log.debug("[node %d] closing idle connection from %s", self._node_id, self.peer)
            await self._responses.put(None)
            await sender
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            # Shutdown stopped waiting for us, e.g. for a peer that does not read its
            # answers (the queue is full, the sender stuck): drop what is unsent. The
            # task ends here anyway; not re-raising keeps Python 3.11's stream callback
            # from logging the cancelled connection task as an error.
            self._writer.transport.abort()
        finally:
            sender.cancel()
            self._writer.close()

    async def _read_requests(self) -> None:
        while not self._draining:
            async with asyncio.timeout(self._idle_timeout_s):  # wait_for can eat a cancel
                size_bytes = await self._reader.readexactly(4)
            (size,) = _SIZE.unpack(size_bytes)
            smallest, largest, limit = self._frame_limits()
            if size < smallest or size > largest:
                log.warning(
                    "[node %d] closing connection from %s: request size %d is outside %d..%d (%s)",
                    self._node_id,
                    self.peer,
                    size,
                    smallest,
                    largest,
                    limit,
                )
                return
            # A client that stalls inside a frame is as idle as one that sends nothing.
            async with asyncio.timeout(self._idle_timeout_s):
                frame = await self._reader.readexactly(size)
            # As Kafka mutes a throttled client's channel: checked once the request is in,
            # because the answer that set the mute was usually sent while this loop was
            # already waiting for the next request (a check before the wait let one more
            # request through, e.g. a second full fetch for a consumer over its quota).
            muted_s = self._muted_until - time.perf_counter()
            if muted_s > 0:
                await _throttle_wait(muted_s)
            self.last_active_s = read_at = time.perf_counter()
            answer = self._start(frame, read_at)
            if answer is None:
                return
            await self._responses.put(answer)
            if self._close_after_answer:
                return

    def _frame_limits(self) -> tuple[int, int, str]:
        """The smallest and largest frame this connection takes now, and what sets them."""
        gate = self._sasl
        if gate is None or gate.principal is not None:
            return 8, self._max_request_bytes, "socket.request.max.bytes"
        return (0 if gate.raw_tokens else 8), _MAX_SASL_BYTES, "before authentication"

    def _start(self, frame: bytes, read_at: float) -> _Answer | None:
        """The task answering `frame` (and its timing, for the metrics), or None to close
        the connection."""
        gate = self._sasl
        if gate is not None and gate.raw_tokens:
            return self._sasl_answer(0, gate.raw_token(frame))
        if len(frame) >= 2 and int.from_bytes(frame[:2], "big", signed=True) >= FIRST_PRIVATE_KEY:
            if gate is not None and gate.principal is None:  # nodes log in first, too
                log.warning(
                    "[node %d] closing connection from %s: node-to-node frame before SASL "
                    "authentication",
                    self._node_id,
                    self.peer,
                )
                return None
            if gate is not None and gate.expired():
                return None
            task = self._start_private(frame)
            return None if task is None else (task, None)
        try:
            request = decode_request(
                frame,
                client_host=self.host,
                listener=self.listener,
                principal=self.principal,
                connection_id=self.connection_id,
            )
        except UnsupportedVersion as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                # Answer in v0, which every client can read, listing what we support.
                body = api_versions_body(0, ErrorCode.unsupported_version)
                frame_out = encode_response(exc.correlation_id, body)
                return asyncio.create_task(_ready(frame_out)), None
            log.warning("[node %d] closing connection from %s: %s", self._node_id, self.peer, exc)
            return None
        except RequestError as exc:
            log.warning("[node %d] closing connection from %s: %s", self._node_id, self.peer, exc)
            return None
        if gate is not None and gate.principal is None:
            return self._authenticating(gate, request)
        if gate is not None:
            if request.api_key == ApiKey.SASL_HANDSHAKE:
                step = gate.reauthenticate(request)
                if step is not None:
                    return self._sasl_answer(request.correlation_id, step)
            if gate.expired():
                return None
        if request.api_key not in self._apis:
            log.warning(
                "[node %d] closing connection from %s: %s is served on the controller "
                "listener only",
                self._node_id,
                self.peer,
                request.api_key.name,
            )
            return None
        log.debug(
            "[node %d] %s v%d from %s (%s)",
            self._node_id,
            request.api_key.name,
            request.api_version,
            self.peer,
            request.client_id,
        )
        timing = None if self._observe is None else _Timing(request.api_key.name, read_at)
        throttle = self._throttle
        if throttle is not None and throttle.enforced():
            # What the request brings in counts now, so a producer over its quota is muted
            # before its next request is served, as Kafka, which reads one at a time, does.
            wait_ms = throttle.throttle_ms(self._usage(request, request_bytes=len(frame)))
            self._mute(wait_ms)
            answered = self._throttled(request, timing, wait_ms, throttle)
            return asyncio.create_task(answered), timing
        return asyncio.create_task(self._answer(request, timing)), timing

    def _start_private(self, frame: bytes) -> asyncio.Task[bytes | None] | None:
        api_key, api_version, correlation_id = _PRIVATE_HEADER.unpack_from(frame, 0)
        if self._private is None:
            log.warning(
                "[node %d] closing connection from %s: strom's node-to-node API %d is served "
                "on the controller listener only",
                self._node_id,
                self.peer,
                api_key,
            )
            return None
        if self._node_peer is not None and not self._node_peer(self.principal, self.host):
            log.warning(
                "[node %d] closing connection from %s: %s may not use strom's node-to-node "
                "APIs (it needs CLUSTER_ACTION on the cluster, e.g. as one of super.users)",
                self._node_id,
                self.peer,
                self.principal,
            )
            return None
        payload = frame[_PRIVATE_HEADER.size :]
        return asyncio.create_task(
            self._answer_private(api_key, api_version, correlation_id, payload)
        )

    def _authenticating(self, gate: SaslGate, request: Request) -> _Answer | None:
        """A request before SASL authentication completed: SaslHandshake and
        SaslAuthenticate go to the gate, ApiVersions is served, anything else closes."""
        if gate.refuses(request.api_key):
            log.warning(
                "[node %d] closing connection from %s: %s before SASL authentication",
                self._node_id,
                self.peer,
                request.api_key.name,
            )
            return None
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            return self._sasl_answer(request.correlation_id, gate.handshake(request))
        if request.api_key == ApiKey.SASL_AUTHENTICATE:
            return self._sasl_answer(request.correlation_id, gate.authenticate(request))
        return asyncio.create_task(self._answer(request, None)), None

    def _sasl_answer(self, correlation_id: int, step: SaslStep) -> _Answer:
        if step.raw is not None:
            frame: bytes | None = _SIZE.pack(len(step.raw)) + step.raw
        elif step.body is not None:
            frame = encode_response(correlation_id, step.body)
        else:
            frame = None
        if self._sasl is not None and self._sasl.principal is not None:
            self.principal = self._sasl.principal
        self._close_after_answer = step.close
        return asyncio.create_task(_delayed(frame, step.delay_s)), None

    async def _answer_private(
        self, api_key: int, api_version: int, correlation_id: int, payload: bytes
    ) -> bytes | None:
        assert self._private is not None
        try:
            answer = await self._private(api_key, api_version, payload)
        except PrivatePayloadError as exc:
            log.warning("[node %d] closing connection from %s: %s", self._node_id, self.peer, exc)
            self._draining = True
            self._writer.close()
            return None
        if answer is None:
            return None
        return _SIZE.pack(len(answer) + 4) + _SIZE.pack(correlation_id) + answer

    async def _answer(self, request: Request, timing: _Timing | None) -> bytes | None:
        if timing is not None:
            timing.started_at = time.perf_counter()
        body = await self._dispatch(request)
        frame = None if body is None else encode_response(request.correlation_id, body)
        if timing is not None:
            timing.handled_at = time.perf_counter()
        return frame

    def _usage(self, request: Request, **used: Any) -> RequestUsage:
        return RequestUsage(
            principal=self.principal,
            client_id=request.client_id or "",
            api_key=request.api_key,
            api_version=request.api_version,
            request=request.body,
            **used,
        )

    def _mute(self, wait_ms: int) -> None:
        if wait_ms > 0:
            self._muted_until = max(self._muted_until, time.perf_counter() + wait_ms / 1000)

    async def _throttled(
        self,
        request: Request,
        timing: _Timing | None,
        admitted_ms: int,
        throttle: RequestThrottle,
    ) -> bytes | None:
        """The answer to a request measured against the client quotas (throttling.py):
        `admitted_ms` is the wait its bytes in cost; what its answer and its handling
        cost counts once it is answered. The handling ends before an old client's wait,
        which the metrics count as the answer's time in the queue."""
        if timing is not None:
            timing.started_at = time.perf_counter()
        call = TimedCall(self._dispatch(request))
        body = await call
        frame = None if body is None else encode_response(request.correlation_id, body)
        if timing is not None:
            timing.handled_at = time.perf_counter()
        used = self._usage(
            request, response_bytes=0 if frame is None else len(frame), handler_s=call.spent_s
        )
        answered_ms = throttle.throttle_ms(used)
        self._mute(answered_ms)  # the admitted wait is under way since it was read
        wait_ms = max(admitted_ms, answered_ms)
        if wait_ms <= 0:
            return frame
        if body is None:
            return None
        frame = encode_response(request.correlation_id, with_throttle_time(body, wait_ms))
        if not client_throttles(request.api_key, request.api_version):
            await _throttle_wait(wait_ms / 1000)  # a client too old to wait: Kafka holds it
        return frame

    async def _send_responses(self) -> None:
        broken = False
        while True:
            answer = await self._responses.get()
            if answer is None:
                return
            task, timing = answer
            try:
                frame = await task
            except Exception:
                log.exception(
                    "[node %d] bug while handling a request from %s; closing its connection",
                    self._node_id,
                    self.peer,
                )
                broken = True
                self._draining = True
                self._writer.close()
                continue
            dequeued_at = time.perf_counter()
            if frame is None or broken:
                self._observed(timing, dequeued_at, dequeued_at)
                continue
            self._writer.write(frame)
            try:
                async with asyncio.timeout(self._idle_timeout_s):  # wait_for can eat a cancel
                    await self._writer.drain()
            except TimeoutError:
                log.info(
                    "[node %d] closing connection from %s: it has not read its answers for "
                    "%.0f s (connections.max.idle.ms)",
                    self._node_id,
                    self.peer,
                    self._idle_timeout_s,
                )
                self._writer.transport.abort()
                broken = True
            self._observed(timing, dequeued_at, time.perf_counter())

    def _observed(self, timing: _Timing | None, dequeued_at: float, sent_at: float) -> None:
        if timing is not None and self._observe is not None:
            self._observe(
                timing.api_name,
                timing.read_at,
                timing.started_at,
                timing.handled_at,
                dequeued_at,
                sent_at,
            )


async def _ready(frame: bytes) -> bytes:
    return frame


async def _delayed(frame: bytes | None, delay_s: float) -> bytes | None:
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    return frame


async def _throttle_wait(seconds: float) -> None:
    """How a throttled connection waits (one place, for the tests to watch)."""
    await asyncio.sleep(seconds)
