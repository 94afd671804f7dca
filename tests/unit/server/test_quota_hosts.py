"""An IP client quota named by a host name (strom.server.quota_hosts): resolved off the
event loop when the quotas change, then counted for the connections from its addresses.
The resolver is the machine's own, asked only for `localhost` and for names it refuses
without a name server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from server_harness import run

from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.server.quota_hosts import QuotaHostNames, resolve_host_names
from strom.server.throttling import ClientQuotaThrottle


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_localhost_resolves_to_its_loopback_address() -> None:
    assert "127.0.0.1" in resolve_host_names(["localhost"])["localhost"]


def test_a_name_that_cannot_resolve_counts_for_no_address_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        assert resolve_host_names(["bad..name"]) == {"bad..name": frozenset()}
    assert "counts for no address" in caplog.text


def test_a_quota_on_localhost_refuses_its_connections_once_resolved() -> None:
    now = [0]
    image = MetadataImage(
        client_quotas={QuotaEntity.ip("localhost"): {"connection_creation_rate": 1.0}}
    )
    throttle = ClientQuotaThrottle(lambda: image, clock_ms=lambda: now[0])

    async def scenario() -> list[int]:
        throttle.connection_ms("10.1.1.1")  # starts the resolution
        hosts = throttle._hosts
        await _until(lambda: "localhost" in hosts.addresses, "localhost to resolve")
        return [throttle.connection_ms("127.0.0.1") for _ in range(11)]

    waits = run(scenario())
    # At 1 a second, a first burst of 10 passes, then the next is refused.
    assert waits[:10] == [0] * 10 and waits[10] > 0
    assert throttle.connection_ms("10.1.1.1") == 0


def test_the_names_are_resolved_again_only_when_they_change() -> None:
    names = QuotaHostNames()
    first = {QuotaEntity.ip("localhost"): {"connection_creation_rate": 1.0}}

    async def scenario() -> None:
        names.refresh(first)
        await _until(lambda: bool(names.addresses), "localhost to resolve")
        resolved = names.addresses
        # Other quotas, the same names: nothing is asked again.
        names.refresh({**first, QuotaEntity.user("alice"): {"producer_byte_rate": 1.0}})
        assert names.addresses is resolved
        # No host name left: nothing to count.
        names.refresh({QuotaEntity.ip("10.0.0.1"): {"connection_creation_rate": 1.0}})
        assert names.addresses == {}

    run(scenario())
