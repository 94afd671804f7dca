"""What each group of handlers reaches: the ports the broker hands them, never itself.

A handler is `async (context, request) -> response body | None`, where the context is a
frozen dataclass of the few services its APIs use. The broker builds each context once,
at construction (handlers/__init__.py binds them into the dispatch tables), so a test can
build one around real partition logs and a replayed metadata image, without a broker or a
socket. Values that change while the broker runs (the metadata image, whether it is
stopping) are read through a port at each request, never copied into the context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from strom.metadata.image import MetadataImage
from strom.server.partitions import PartitionManager


class MetadataView(Protocol):
    """The committed metadata this node serves from (server/metadata_state.py)."""

    @property
    def image(self) -> MetadataImage: ...


class ProducerIds(Protocol):
    """Producer ids for InitProducerId (server/producer_ids.py)."""

    async def next_id(self) -> int:
        """A new producer id; ProducerIdsUnavailable when none can be had now."""
        ...


@dataclass(frozen=True, slots=True)
class ProduceContext:
    """Produce and InitProducerId."""

    node_id: int
    metadata: MetadataView
    partitions: PartitionManager
    producer_ids: ProducerIds


@dataclass(frozen=True, slots=True)
class FetchContext:
    """Fetch, ListOffsets and OffsetForLeaderEpoch."""

    metadata: MetadataView
    partitions: PartitionManager
    stopping: Callable[[], bool]
    """The broker is shutting down: long polls answer at once."""
