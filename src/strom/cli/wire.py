"""Admin calls confluent-kafka cannot make, through strom's own asyncio client.

librdkafka has no DescribeQuorum, does not ask DescribeCluster for fenced brokers, and
refuses a BROKER config resource without a broker id (Kafka's cluster-wide default).
These commands speak the Kafka protocol with strom.client.KafkaConnection instead, so they
work against any Kafka-compatible broker too. Failures become CommandError with the exit
codes of common.py. A --command-config file's security keys, as librdkafka reads them,
make the client's TLS and SASL (`client_security`): security.protocol, ssl.ca.location,
ssl.ca.pem, ssl.certificate.location, ssl.key.location, ssl.key.password,
ssl.endpoint.identification.algorithm, enable.ssl.certificate.verification,
sasl.mechanism(s), sasl.username and sasl.password; its other keys are librdkafka's and do
not concern these commands.
"""

from __future__ import annotations

import socket
import ssl
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

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def client_security(settings: Mapping[str, str], source: str) -> ClientSecurity | None:
    """The TLS and SASL that client settings (librdkafka's keys) ask for; None for
    plaintext. A usage error naming `source` for what strom's client cannot do or for a
    file it cannot read."""
    from strom.client import ClientSecurity, SaslLogin

    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise usage_error(
            f"{source}: security.protocol={protocol} is not one of {', '.join(_PROTOCOLS)}"
        )
    if protocol == "PLAINTEXT":
        return None
    tls = _tls_context(settings, source) if protocol.endswith("SSL") else None
    sasl = None
    if protocol.startswith("SASL"):
        mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))
        try:
            sasl = SaslLogin(
                mechanism.strip().upper(),
                settings.get("sasl.username", ""),
                settings.get("sasl.password", ""),
            )
        except ValueError as exc:
            raise usage_error(f"{source}: {exc}") from None
    return ClientSecurity(tls, sasl)


def _tls_context(settings: Mapping[str, str], source: str) -> ssl.SSLContext:
    """The client's TLS context: the CA (ssl.ca.location or ssl.ca.pem; the system's by
    default), a client certificate if one is given, and host name checks unless turned
    off, as librdkafka does."""
    context = ssl.create_default_context()
    try:
        ca = settings.get("ssl.ca.location", "").strip()
        if ca and ca != "probe" and Path(ca).is_dir():
            context.load_verify_locations(capath=ca)
        elif ca and ca != "probe":
            context.load_verify_locations(cafile=ca)
        if settings.get("ssl.ca.pem", "").strip():
            context.load_verify_locations(cadata=settings["ssl.ca.pem"])
        certificate = settings.get("ssl.certificate.location", "").strip()
        if certificate:
            context.load_cert_chain(
                certificate,
                settings.get("ssl.key.location", "").strip() or None,
                password=settings.get("ssl.key.password") or None,
            )
    except (OSError, ssl.SSLError) as exc:
        raise usage_error(f"{source}: cannot use its TLS settings: {exc}") from None
    identification = settings.get("ssl.endpoint.identification.algorithm", "https")
    if identification.strip().lower() == "none":
        context.check_hostname = False
    if settings.get("enable.ssl.certificate.verification", "true").strip().lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


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
            raise CommandError(f"{name}: the broker at {connection.peer} cannot: {exc}") from None
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
