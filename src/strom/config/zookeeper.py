"""zookeeper.connect: which ZooKeeper ensemble (and chroot) holds the metadata."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strom.config.errors import ConfigError
from strom.config.listeners import Endpoint, QuorumVoter, parse_endpoint
from strom.config.schema import invalid_value


@dataclass(frozen=True, slots=True)
class ZooKeeperConnect:
    """zookeeper.connect, parsed: the ensemble's servers and the chroot ("" for none)."""

    hosts: tuple[Endpoint, ...]
    chroot: str

    def __str__(self) -> str:
        return ",".join(str(host) for host in self.hosts) + self.chroot


def parse_zookeeper_connect(
    text: str | None,
    given: Mapping[str, str],
    both_roles: bool,
    voters: tuple[QuorumVoter, ...],
    bootstrap: tuple[Endpoint, ...],
) -> ZooKeeperConnect | None:
    """zookeeper.connect checked against the rest of the config (None when unset)."""
    key = "zookeeper.connect"
    text = (text or "").strip()
    if not text:
        return None
    servers, slash, chroot = text.partition("/")
    chroot = f"/{chroot}" if slash else ""
    if chroot and (chroot.endswith("/") or "//" in chroot):
        raise invalid_value(key, text, f"chroot {chroot!r} must be a path like /strom")
    hosts = tuple(
        parse_endpoint(part.strip(), key=key) for part in servers.split(",") if part.strip()
    )
    if not hosts:
        raise invalid_value(key, text, "expected host:port[,host:port...][/chroot]")
    if voters or bootstrap:
        raise ConfigError(
            "'zookeeper.connect' and 'controller.quorum.voters' (or "
            "'controller.quorum.bootstrap.servers') name two metadata stores; set only one",
            key=key,
        )
    if "broker.id" not in given and "node.id" not in given:
        raise ConfigError("with 'zookeeper.connect' set 'broker.id' (or node.id)", key="broker.id")
    if not both_roles:
        raise ConfigError(
            "with 'zookeeper.connect' every node is a broker that may become the controller: "
            "process.roles must be broker,controller",
            key="process.roles",
        )
    return ZooKeeperConnect(hosts, chroot)
