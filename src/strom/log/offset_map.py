"""The key -> latest offset map a cleaning pass builds over the dirty part of a log.

Keys are kept whole (a dict of bytes), so two keys can never be mistaken for one another
(Kafka keeps a hash instead, to fit a fixed buffer). The memory used is estimated as the
key bytes plus a fixed overhead per entry; a pass stops adding batches once the estimate
reaches its budget and cleans only the part of the dirty range it has mapped.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.log.record_filter import RecordFields

__all__ = ["ENTRY_OVERHEAD_BYTES", "OffsetMap"]

ENTRY_OVERHEAD_BYTES = 120
"""Estimated cost of one entry besides its key: the dict slot, the bytes and int objects."""


class OffsetMap:
    """Latest offset of each key seen, within a memory budget."""

    # Transitions: empty -> (put)* -> read with latest(); full once the estimate
    # reaches the budget (puts still succeed: the caller stops at a batch boundary).
    __slots__ = ("_key_bytes", "_offsets", "budget_bytes")

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._offsets: dict[bytes, int] = {}
        self._key_bytes = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def put(self, key: bytes, offset: int) -> None:
        offsets = self._offsets
        if key not in offsets:
            self._key_bytes += len(key)
        offsets[key] = offset

    def put_records(self, base_offset: int, records: Iterable[RecordFields]) -> None:
        """``put`` every keyed record of a batch at ``base_offset``."""
        offsets = self._offsets
        added = 0
        for record in records:
            key = record[4]
            if key is not None:
                if key not in offsets:
                    added += len(key)
                offsets[key] = base_offset + record[2]
        self._key_bytes += added

    def latest(self, key: bytes) -> int | None:
        return self._offsets.get(key)

    @property
    def estimated_bytes(self) -> int:
        return self._key_bytes + len(self._offsets) * ENTRY_OVERHEAD_BYTES

    @property
    def full(self) -> bool:
        return self.estimated_bytes >= self.budget_bytes
