"""Fixtures of the fault tests: the metadata store of a run, and whether this machine can
build the network namespaces the network faults need."""

from __future__ import annotations

import pytest

from .network import sweep_leftovers, unavailable_reason
from .runner import STORES


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    """The metadata store the cluster of a run keeps its metadata in."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def network_faults() -> None:
    """Skip unless network namespaces and nftables rules can be made here (root, `ip`,
    `nft`); first remove what runs of dead processes left behind."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    sweep_leftovers()
