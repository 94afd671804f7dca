"""Admin calls confluent-kafka cannot make, through strom's own asyncio client.

librdkafka has no DescribeQuorum, does not ask DescribeCluster for fenced brokers, and
refuses a BROKER config resource without a broker id (Kafka's cluster-wide default).
These commands speak the Kafka protocol with strom.client.KafkaConnection instead, so they
work against any Kafka-compatible broker too. Failures become CommandError with the exit
codes of common.py. A --command-config file's security keys, as librdkafka reads them,
make the client's TLS and SASL (`client_security`, strom.client.settings: PLAIN, SCRAM,
and OAUTHBEARER with librdkafka's unsecured tokens or client credentials); its other
keys are librdkafka's and do not concern these commands.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from strom.cli.common import (
    CommandError,
    ExitCode,
    read_command_config,
    unreachable_message,
    usage_error,
)

if TYPE_CHECKING:
    from strom.client import ClientSecurity, KafkaConnection

CLIENT_ID = "strom-cli"
T = TypeVar("T")


class ApiNotSupported(CommandError):
    """The broker speaks no version of the request the command needs (an API it does
    not serve, such as a share-group API on a broker without share groups)."""


def client_security(settings: Mapping[str, str], source: str) -> ClientSecurity | None:
    """The TLS and SASL that client settings (librdkafka's keys) ask for; None for
    plaintext. A usage error naming `source` for what strom's client cannot do or for a
    file it cannot read."""
    from strom.client.settings import security_from_settings

    try:
        return security_from_settings(settings)
    except ValueError as exc:
        raise usage_error(f"{source}: {exc}") from None


def read_client_security(command_config: Path | None) -> ClientSecurity | None:
    """The TLS and SASL a --command-config file asks for (None: plaintext)."""
    return client_security(
        read_command_config(command_config), f"--command-config {command_config}"
    )


def format_address(host: str, port: int) -> str:
    """host:port, an IPv6 host in brackets (as strom.config.listeners.format_host_port,
    which this module does not import: strom.config takes a while to load)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` as (host, port) pairs; a usage error if malformed."""
    from strom.config import ConfigError
    from strom.config.listeners import parse_host_port

    addresses = []
    for item in bootstrap.split(","):
        if not item.strip():
            continue
        try:
            addresses.append(parse_host_port(item, key="--bootstrap-server"))
        except ConfigError as exc:
            raise usage_error(str(exc)) from None
    if not addresses:
        raise usage_error("--bootstrap-server must not be empty")
    return addresses


def connect_failure_reason(error: BaseException, timeout_s: float) -> str:
    """A short reason, as common.unreachable_reason gives for librdkafka's errors."""
    cause = error.__cause__
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused"
    if isinstance(cause, socket.gaierror):
        return "host name not found"
    text = str(error)
    if "timed out" in text:
        return f"no answer within {timeout_s:g} s"
    return text


class WireSession:
    """One connection to the first bootstrap server that answers, and calls on it."""

    def __init__(
        self, bootstrap: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.bootstrap = bootstrap.strip()
        self.security = security
        self.addresses = parse_bootstrap(self.bootstrap)
        self.timeout_s = timeout_s
        self.connection: KafkaConnection | None = None
        self.address: tuple[str, int] | None = None

    async def open(self) -> KafkaConnection:
        # Imported here: kio's schemas take a while to load; most commands never need them.
        from strom.client import (
            ClientAuthenticationError,
            ClientConnectionError,
            KafkaConnection,
        )

        if self.connection is not None:
            return self.connection
        last: BaseException | None = None
        for host, port in self.addresses:
            try:
                self.connection = await KafkaConnection.connect(
                    host,
                    port,
                    client_id=CLIENT_ID,
                    timeout_s=self.timeout_s,
                    security=self.security,
                )
            except ClientAuthenticationError as exc:
                raise CommandError(
                    f"cannot connect to {format_address(host, port)}: {exc}",
                    ExitCode.UNREACHABLE,
                ) from None
            except ClientConnectionError as exc:
                last = exc
                continue
            self.address = (host, port)
            return self.connection
        reason = connect_failure_reason(last, self.timeout_s) if last else None
        raise CommandError(
            unreachable_message(self.bootstrap, reason, self.timeout_s), ExitCode.UNREACHABLE
        )

    async def call(
        self,
        api_key: int,
        name: str,
        fields: Mapping[str, Any],
        *,
        min_version: int = 0,
        max_version: int | None = None,
    ) -> tuple[int, Any]:
        """(version used, decoded response) of one request at the highest version both
        sides speak within the bounds."""
        from strom.client import (
            ClientConnectionError,
            ClientError,
            UnsupportedVersionError,
            pick_version,
        )

        connection = await self.open()
        try:
            versions = await connection.api_versions(timeout_s=self.timeout_s)
            version = pick_version(
                api_key, versions, min_version=min_version, max_version=max_version
            )
            response = await connection.request(
                api_key, version, dict(fields), timeout_s=self.timeout_s
            )
        except UnsupportedVersionError as exc:
            raise ApiNotSupported(
                f"{name}: the broker at {connection.peer} cannot: {exc}"
            ) from None
        except ClientConnectionError as exc:
            # An answer that never came is a Kafka-level failure (1), as in admin_outcome.
            timed_out = "timed out" in str(exc)
            code = ExitCode.KAFKA_ERROR if timed_out else ExitCode.UNREACHABLE
            raise CommandError(f"{name}: {exc}", code) from None
        except ClientError as exc:
            raise CommandError(f"{name}: {exc}") from None
        return version, response

    async def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            await self.connection.wait_closed()
            self.connection = None


def run_session(
    bootstrap: str,
    timeout_s: float,
    work: Callable[[WireSession], Awaitable[T]],
    command_config: Path | None = None,
) -> T:
    """Run `work` with an open-on-demand session, closing it afterwards, secured as the
    command config says."""
    import asyncio

    security = read_client_security(command_config)

    async def main() -> T:
        session = WireSession(bootstrap, timeout_s, security)
        try:
            return await work(session)
        finally:
            await session.close()

    return asyncio.run(main())


def error_name(code: Any) -> str:
    """kio's ErrorCode.invalid_config -> "INVALID_CONFIG", as Kafka and librdkafka name it."""
    name = getattr(code, "name", None)
    return str(name).upper() if name else f"error code {int(code)}"


def is_error(code: Any) -> bool:
    return int(code) != 0
