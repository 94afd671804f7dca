"""Addresses in the config: listeners (`NAME://HOST:PORT`), quorum voters (`ID@HOST:PORT`)
and plain `HOST:PORT`. IPv6 hosts are written in brackets: `[::1]:9092`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from strom.config.schema import invalid_value

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})
_LISTENER_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_HOST = re.compile(r"[A-Za-z0-9_.\-%]*")
_IPV6_HOST = re.compile(r"[A-Fa-f0-9:.%A-Za-z_\-]+")
_PORT = re.compile(r"[0-9]{1,5}")


def format_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Endpoint(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return format_host_port(self.host, self.port)


class QuorumVoter(NamedTuple):
    """One entry of controller.quorum.voters: `node_id@host:port`."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Listener:
    """A named address: `name` is upper case; host "0.0.0.0" means every interface."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{format_host_port(self.host, self.port)}"

    @classmethod
    def parse(cls, text: str, *, key: str = "listeners", empty_host: str = "0.0.0.0") -> Listener:
        """`NAME://HOST:PORT` with an empty HOST meaning `empty_host`; ConfigError naming
        `key` otherwise."""
        name, separator, address = text.strip().partition("://")
        if not separator or not _LISTENER_NAME.fullmatch(name):
            raise invalid_value(key, text, "expected NAME://HOST:PORT, e.g. PLAINTEXT://:9092")
        host, port = parse_host_port(address, key=key, whole=text, allow_empty_host=True)
        return cls(name.upper(), host or empty_host, port)


def parse_host_port(
    text: str, *, key: str, whole: str | None = None, allow_empty_host: bool = False
) -> tuple[str, int]:
    """`HOST:PORT` or `[IPV6]:PORT` → (host, port), port 0..65535 (0: any free port)."""
    shown = text if whole is None else whole
    example = "HOST:PORT, e.g. localhost:9092 or [::1]:9092"
    stripped = text.strip()
    if stripped.startswith("["):
        host, bracket, rest = stripped[1:].partition("]")
        if not bracket or not rest.startswith(":") or not host:
            raise invalid_value(key, shown, f"expected {example}")
        port_text = rest[1:]
        if not _IPV6_HOST.fullmatch(host):
            raise invalid_value(key, shown, f"{host!r} is not a valid host")
    else:
        host, colon, port_text = stripped.rpartition(":")
        if not colon:
            raise invalid_value(key, shown, f"expected {example}")
        pattern = _IPV6_HOST if ":" in host else _HOST
        if not pattern.fullmatch(host):
            raise invalid_value(key, shown, f"{host!r} is not a valid host")
    if not host and not allow_empty_host:
        raise invalid_value(key, shown, f"the host is missing; expected {example}")
    if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        raise invalid_value(key, shown, "the port must be a number from 0 to 65535")
    return host, int(port_text)


def parse_voter(text: str, *, key: str = "controller.quorum.voters") -> QuorumVoter:
    node_id, at, address = text.strip().partition("@")
    if not at or not re.fullmatch(r"[0-9]{1,10}", node_id) or int(node_id) > 2**31 - 1:
        raise invalid_value(key, text, "expected ID@HOST:PORT entries, e.g. 1@localhost:9093")
    host, port = parse_host_port(address, key=key, whole=text)
    return QuorumVoter(int(node_id), host, port)


def parse_endpoint(text: str, *, key: str) -> Endpoint:
    host, port = parse_host_port(text, key=key)
    return Endpoint(host, port)
