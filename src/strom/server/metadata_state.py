"""The committed metadata on this node: the image, its offset, and who waits for it.

On a controller the Raft driver applies committed entries here; on a broker-only node the
metadata fetcher does. Either way the broker serves clients from `image`, and listeners
(the partition manager, the group service, the controller) hear of each change once per
batch of entries, not once per entry.

It also keeps the recent committed entries in memory, so a controller can answer a
broker's METADATA_FETCH without touching the Raft log on disk; a broker further behind
than that gets a snapshot of the current image instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from strom.metadata.image import MetadataImage
from strom.metadata.records import decode_entry
from strom.metadata.snapshot import decode_snapshot, encode_snapshot
from strom.raft.messages import Entry, Snapshot

log = logging.getLogger(__name__)

_RECENT_BYTES = 8 << 20


class MetadataState:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.image = MetadataImage.empty()
        self.applied_index = 0
        self.applied_term = 0
        self._recent: deque[Entry] = deque()
        self._recent_bytes = 0
        self._listeners: list[Callable[[MetadataImage], None]] = []
        self._changed = asyncio.Event()

    def subscribe(self, listener: Callable[[MetadataImage], None]) -> None:
        self._listeners.append(listener)

    # --- StateMachine -----------------------------------------------------------------

    def apply(self, entries: Sequence[Entry]) -> None:
        image = self.image
        for entry in entries:
            if entry.index != self.applied_index + 1:
                raise RuntimeError(
                    f"metadata entry {entry.index} applied after {self.applied_index}"
                )
            records = decode_entry(entry.data) if entry.data else ()
            image = image.replay(records, offset=entry.index)
            self.applied_index = entry.index
            self.applied_term = entry.term
            self._remember(entry)
        self._publish(image)

    def restore(self, snapshot: Snapshot) -> None:
        self.reset(decode_snapshot(snapshot.data), index=snapshot.index, term=snapshot.term)
        log.info(
            "[node %d] metadata restored from the snapshot at offset %d",
            self.node_id,
            snapshot.index,
        )

    def reset(self, image: MetadataImage, *, index: int, term: int) -> None:
        """Start over from `image` at `index` (a snapshot, or what a ZooKeeper controller
        read from the store when it took over); entries from index + 1 on follow it."""
        self.applied_index = index
        self.applied_term = term
        self._recent.clear()
        self._recent_bytes = 0
        self._publish(replace(image, offset=index))

    def take_snapshot(self) -> Snapshot | None:
        if self.applied_index == 0:
            return None
        return Snapshot(self.applied_index, self.applied_term, encode_snapshot(self.image))

    # --- readers ----------------------------------------------------------------------

    def entries_from(self, index: int, max_bytes: int) -> tuple[Snapshot | None, list[Entry]]:
        """Committed entries from `index` on; a snapshot first if they are not all in memory."""
        snapshot = None
        if index <= self.applied_index and (not self._recent or self._recent[0].index > index):
            snapshot = self.take_snapshot()
            return snapshot, []
        result: list[Entry] = []
        size = 0
        if self._recent and index >= self._recent[0].index:
            position = index - self._recent[0].index
            for offset in range(position, len(self._recent)):
                entry = self._recent[offset]
                result.append(entry)
                size += len(entry.data)
                if size >= max_bytes:
                    break
        return snapshot, result

    def term_of_applied(self, index: int) -> int | None:
        """The term of the applied entry at `index`, if it is still held in memory."""
        if index == self.applied_index:
            return self.applied_term
        if self._recent and self._recent[0].index <= index <= self._recent[-1].index:
            return self._recent[index - self._recent[0].index].term
        return None

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        """True once the image has reached `offset`, False after `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.applied_index < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):  # wait_for can eat a cancel
                    await self._changed.wait()
            except TimeoutError:
                return False
        return True

    async def changed(self) -> None:
        await self._changed.wait()

    # --- internals --------------------------------------------------------------------

    def _remember(self, entry: Entry) -> None:
        self._recent.append(entry)
        self._recent_bytes += len(entry.data) + 32
        while self._recent_bytes > _RECENT_BYTES and len(self._recent) > 1:
            dropped = self._recent.popleft()
            self._recent_bytes -= len(dropped.data) + 32

    def _publish(self, image: MetadataImage) -> None:
        self.image = image
        for listener in self._listeners:
            listener(image)
        self._changed.set()
        self._changed = asyncio.Event()
