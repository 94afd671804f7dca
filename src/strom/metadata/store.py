"""The interface every metadata store implements.

The controller's decisions (records) go in through `commit`; the store persists them
(and, in a cluster, replicates them) and hands back the image with them replayed. The
embedded single-node store lives in stores/local.py; the Raft quorum and ZooKeeper
stores implement the same protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from strom.metadata.image import MetadataImage
from strom.metadata.records import MetadataRecord


class MetadataStore(Protocol):
    @property
    def image(self) -> MetadataImage: ...

    async def commit(self, records: Sequence[MetadataRecord], *, now_ms: int) -> MetadataImage:
        """Persist `records` atomically; return the image with them applied."""
        ...

    def close(self) -> None: ...
