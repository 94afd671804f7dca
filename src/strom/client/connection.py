"""One TCP connection to a Kafka-protocol peer, with pipelined requests.

Requests are written as they are made; one reader task reads response frames and hands
each to the caller waiting on its correlation id, so any number of calls can be in
flight at once. A response that matches no request, a frame size outside the allowed
range, a lost connection or a call that times out closes the connection and fails every
call still waiting with ClientConnectionError: after that, nothing read from the socket
can be taken for the answer to the wrong request. A caller that is cancelled leaves its
entry behind, so its late answer is recognised and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client import codec
from strom.client.dial import dial
from strom.client.errors import BrokerError, ClientConnectionError
from strom.client.security import (
    ClientAuthenticationError,
    ClientSecurity,
    SaslLogin,
    authenticate,
)
from strom.client.versions import API_VERSIONS_VERSION, api_versions_retry

log = logging.getLogger(__name__)

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024
_SIZE = struct.Struct(">i")
# How long wait_closed() lets a graceful close flush before dropping what is unsent.
_CLOSE_GRACE_S = 1.0
# Re-authentication (KIP-368) begins at a random point in this share of the session's
# lifetime, as Kafka's clients do, so connections opened together do not all renew at once.
REAUTH_SHARE = (0.85, 0.95)
_SOFTWARE_NAME = "strom"


@cache
def _software_version() -> str:
    try:
        return version("strom")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0"


async def _start_tls(writer: asyncio.StreamWriter, context: ssl.SSLContext, host: str) -> None:
    try:
        await writer.start_tls(context, server_hostname=host)
    except ssl.SSLError as exc:
        writer.transport.abort()
        reason = getattr(exc, "verify_message", None) or exc.reason or str(exc)
        raise ClientAuthenticationError(f"TLS handshake failed: {reason}") from None


def _current_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # close() called outside the event loop
        return None


class KafkaConnection:
    """Open -> closed. Closing is final: by close(), a lost peer, a timeout or bad input.

    A SASL session the broker gave a lifetime (`connections.max.reauth.ms`, or an
    OAUTHBEARER token's expiry) is renewed before it ends (KIP-368): once 85-95 % of the
    lifetime has passed, the next call waits until the answers it would overtake are in,
    logs in again on the same connection, and goes on; calls made meanwhile wait their
    turn. A refused re-authentication closes the connection, as a refused login does.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        peer: str,
        client_id: str | None = "strom",
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Wrap an open stream pair (connect() opens one); starts the reader task.
        `clock` (seconds) times the SASL session's renewal."""
        self.peer = peer
        self._reader = reader
        self._writer = writer
        self._client_id = client_id
        self._max_frame_bytes = max_frame_bytes
        self._pending: dict[int, asyncio.Future[bytes]] = {}
        self._correlation_id = 0
        self._close_reason: str | None = None
        self._versions: dict[int, tuple[int, int]] | None = None
        self._versions_lock = asyncio.Lock()
        self._clock = clock
        self._login: SaslLogin | None = None
        self._reauth_at: float | None = None
        self._reauth_lock = asyncio.Lock()
        self._reader_task = asyncio.create_task(
            self._read_responses(), name=f"strom client reader {peer}"
        )

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        client_id: str = "strom",
        timeout_s: float = 5.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        security: ClientSecurity | None = None,
    ) -> KafkaConnection:
        """A connection to host:port, made secure as `security` says (TLS, then a SASL
        login: client/security.py); ClientConnectionError if it cannot be made."""
        peer = f"{host}:{port}"
        tls = None if security is None else security.tls
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await dial(host, port)
                if tls is not None:
                    await _start_tls(writer, tls, host)
        except TimeoutError:
            raise ClientConnectionError(
                f"connecting to {peer} timed out after {timeout_s:g} s"
            ) from None
        except OSError as exc:
            raise ClientConnectionError(f"cannot connect to {peer}: {exc}") from exc
        log.debug("connected to %s", peer)
        connection = cls(
            reader, writer, peer=peer, client_id=client_id, max_frame_bytes=max_frame_bytes
        )
        if security is not None and security.sasl is not None:
            await authenticate(connection, security.sasl, timeout_s)
        return connection

    # --- state -----------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._close_reason is not None

    @property
    def close_reason(self) -> str | None:
        return self._close_reason

    @property
    def in_flight(self) -> int:
        """Requests written whose response has not been read (abandoned ones included)."""
        return len(self._pending)

    def close(self) -> None:
        """Close now; calls still waiting fail with ClientConnectionError. Idempotent."""
        self._close("closed by the client", graceful=True)

    async def wait_closed(self) -> None:
        """Wait until the connection is closed (by close() or otherwise) and its reader
        task has ended; a graceful close gets a moment to flush what is unsent."""
        await asyncio.wait([self._reader_task])
        try:
            async with asyncio.timeout(_CLOSE_GRACE_S):
                await self._writer.wait_closed()
        except TimeoutError:
            self._writer.transport.abort()
        except (ConnectionError, OSError):
            pass

    def _close(self, reason: str, *, graceful: bool = False) -> None:
        if self._close_reason is not None:
            return
        self._close_reason = reason
        pending, self._pending = self._pending, {}
        if not graceful:
            # An idle connection the peer closes (connections.max.idle.ms) is routine.
            waiting = sum(not future.done() for future in pending.values())
            level = logging.INFO if waiting else logging.DEBUG
            log.log(
                level, "connection to %s closed (%d calls failed): %s", self.peer, waiting, reason
            )
        for future in pending.values():
            if not future.done():
                future.set_exception(self._closed_error())
                # Its caller may be failing another way (e.g. in drain()) and never look.
                future.exception()
        if not self._reader_task.done() and _current_task() is not self._reader_task:
            self._reader_task.cancel()
        if graceful:
            self._writer.close()
        else:
            self._writer.transport.abort()

    def _closed_error(self) -> ClientConnectionError:
        return ClientConnectionError(f"connection to {self.peer} closed: {self._close_reason}")

    def _check_open(self) -> None:
        if self._close_reason is not None:
            raise self._closed_error()
        if self._writer.is_closing():
            self._close("the transport is closing")
            raise self._closed_error()

    def _next_correlation_id(self) -> int:
        correlation_id = self._correlation_id
        while correlation_id in self._pending:  # only after 2**31 requests, if ever
            correlation_id = codec.next_correlation_id(correlation_id)
        self._correlation_id = codec.next_correlation_id(correlation_id)
        return correlation_id

    # --- calls -------------------------------------------------------------------------

    async def request(
        self, api_key: int, api_version: int, body: Any, *, timeout_s: float = 30.0
    ) -> Any:
        """Send a Kafka request (a kio request or a mapping of its fields); its response.

        Produce with acks=0 is not answered by a broker: it returns None once written.
        """
        self._check_open()
        await self._renew_session(timeout_s)
        return await self.login_request(api_key, api_version, body, timeout_s=timeout_s)

    async def login_request(
        self, api_key: int, api_version: int, body: Any, *, timeout_s: float = 30.0
    ) -> Any:
        """`request` without waiting for the SASL session to be renewed: the SASL
        exchange's own requests (client/security.py)."""
        if isinstance(body, Mapping):
            body = codec.build_request(api_key, api_version, body)
        self._check_open()
        correlation_id = self._next_correlation_id()
        frame = codec.encode_request(
            api_key, api_version, correlation_id, body, client_id=self._client_id
        )
        what = f"API {api_key} v{api_version} (correlation id {correlation_id})"
        if not codec.expects_response(api_key, body):
            await self._send(frame, timeout_s, what)
            return None
        log.debug("%s: sending %s", self.peer, what)
        response = await self._exchange(correlation_id, frame, timeout_s, what)
        return codec.decode_response(api_key, api_version, response)

    async def raw_request(
        self, api_key: int, api_version: int, payload: bytes, *, timeout_s: float = 30.0
    ) -> bytes:
        """Send one of strom's private requests; the payload of its response."""
        self._check_open()
        await self._renew_session(timeout_s)
        correlation_id = self._next_correlation_id()
        frame = codec.encode_private_request(api_key, api_version, correlation_id, payload)
        what = f"private API {api_key} v{api_version} (correlation id {correlation_id})"
        log.debug("%s: sending %s", self.peer, what)
        response = await self._exchange(correlation_id, frame, timeout_s, what)
        return codec.private_response_payload(response)

    async def send_oneway(
        self, api_key: int, api_version: int, payload: bytes, *, timeout_s: float = 30.0
    ) -> None:
        """Send one of strom's private one-way messages; waits while the socket is full."""
        self._check_open()
        await self._renew_session(timeout_s)
        correlation_id = self._next_correlation_id()
        frame = codec.encode_private_request(api_key, api_version, correlation_id, payload)
        await self._send(frame, timeout_s, f"private API {api_key} v{api_version} (one-way)")

    # --- the SASL session's lifetime (KIP-368) ----------------------------------------

    def logged_in(self, login: SaslLogin, session_lifetime_ms: int) -> None:
        """A SASL login (or re-login) succeeded; the broker gave the session
        `session_lifetime_ms` (0: no limit)."""
        self._login = login
        self._reauth_at = None
        if session_lifetime_ms > 0:
            share = random.uniform(*REAUTH_SHARE)
            self._reauth_at = self._clock() + session_lifetime_ms / 1000 * share

    async def _renew_session(self, timeout_s: float) -> None:
        """Log in again first if the session is due for renewal (or being renewed)."""
        due = self._reauth_at
        if not self._reauth_lock.locked() and (due is None or self._clock() < due):
            return
        async with self._reauth_lock:
            self._check_open()
            due, login = self._reauth_at, self._login
            if due is None or login is None or self._clock() < due:
                return  # another call renewed it while this one waited
            self._reauth_at = None
            # Answers still awaited come first: the broker reads requests in order, and
            # those it has were sent on the session being renewed.
            waiting = [future for future in self._pending.values() if not future.done()]
            if waiting:
                await asyncio.wait(waiting, timeout=timeout_s)
            log.debug("%s: renewing the SASL session of %s", self.peer, login.mechanism)
            try:
                await authenticate(self, login, timeout_s)
            except ClientAuthenticationError as exc:
                raise ClientAuthenticationError(
                    f"re-authenticating with {self.peer} failed: {exc}"
                ) from None

    async def api_versions(self, *, timeout_s: float = 30.0) -> dict[int, tuple[int, int]]:
        """{api_key: (min, max)} the peer serves; asked once per connection, then cached."""
        if self._versions is None:
            async with self._versions_lock:
                if self._versions is None:
                    self._versions = await self._ask_api_versions(timeout_s)
        return dict(self._versions)

    async def _ask_api_versions(self, timeout_s: float) -> dict[int, tuple[int, int]]:
        version: int | None = API_VERSIONS_VERSION
        while version is not None:
            body = {
                "client_software_name": _SOFTWARE_NAME,
                "client_software_version": _software_version(),
            }
            response = await self.request(
                codec.API_VERSIONS_KEY, version, body, timeout_s=timeout_s
            )
            versions = {
                int(item.api_key): (int(item.min_version), int(item.max_version))
                for item in response.api_keys
            }
            if response.error_code == ErrorCode.none:
                log.debug("%s serves ApiVersions v%d", self.peer, version)
                return versions
            if response.error_code != ErrorCode.unsupported_version:
                break
            version = api_versions_retry(version, versions)
        raise BrokerError(
            f"ApiVersions to {self.peer} failed: {response.error_code.name}", response.error_code
        )

    # --- I/O ---------------------------------------------------------------------------

    async def _exchange(
        self, correlation_id: int, frame: bytes, timeout_s: float, what: str
    ) -> bytes:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = future
        try:
            async with asyncio.timeout(timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
                # Cancelling this wait cancels the future, which stays in _pending: the
                # reader drops the late answer when it comes.
                return await future
        except TimeoutError:
            self._close(f"{what} timed out after {timeout_s:g} s")
            raise self._closed_error() from None
        except (ConnectionError, OSError) as exc:  # from drain()
            self._close(f"writing {what} failed: {exc!r}")
            raise self._closed_error() from exc

    async def _send(self, frame: bytes, timeout_s: float, what: str) -> None:
        log.debug("%s: sending %s", self.peer, what)
        try:
            async with asyncio.timeout(timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
        except TimeoutError:
            self._close(f"{what} not written after {timeout_s:g} s")
            raise self._closed_error() from None
        except (ConnectionError, OSError) as exc:
            self._close(f"writing {what} failed: {exc!r}")
            raise self._closed_error() from exc

    async def _read_responses(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(_SIZE.size))
                if not _SIZE.size <= size <= self._max_frame_bytes:
                    self._close(f"response size {size} is outside 4..{self._max_frame_bytes}")
                    return
                frame = await self._reader.readexactly(size)
                correlation_id = codec.correlation_id_of(frame)
                future = self._pending.pop(correlation_id, None)
                if future is None:
                    self._close(f"response with unknown correlation id {correlation_id}")
                    return
                if not future.done():
                    future.set_result(frame)
        except asyncio.IncompleteReadError:
            self._close("the peer closed the connection")
        except (ConnectionError, OSError) as exc:
            self._close(f"connection lost: {exc!r}")
        except Exception:
            log.exception("bug while reading responses from %s; closing the connection", self.peer)
            self._close("a bug in the response reader")
