"""The leader's memory of the idempotent batches it refused, so that its own refusal is
not answered as a lost batch.

Producers pipeline up to five requests per partition. When the leader refuses one
(acks=all while the ISR is below `min.insync.replicas`: NOT_ENOUGH_REPLICAS, nothing
written) and the ISR grows back before the next request is handled, the next batch
arrives with a sequence gap where the refused one belongs. Answered as the log sees it,
OUT_OF_ORDER_SEQUENCE_NUMBER, it makes librdkafka bump the producer epoch (KIP-360) and
write again, under the new epoch, every batch of every partition whose answer it is still
missing, so a batch that was written but whose answer was lost (a leader killed or cut
off) is written twice. The gap is the leader's own doing, so the leader answers the batch
after it with the refusal's own retriable error: nothing of it was written, and the
producer retries the refused batch and everything after it, in order, under the same
epoch, where the log deduplicates them.

The same holds for a refusal as NOT_LEADER_OR_FOLLOWER by a replica that becomes the
leader before the next batch arrives: a connection's requests are decided as they arrive
and answered in order, so a refusal can be decided well before a later batch of the same
pipeline is admitted.

Only a refusal of an in-sequence batch is remembered, until the producer's next batch is
admitted, and a gap is put down to it only while the log still expects exactly that
batch next: then the client, told the refused batch was not written, still holds it and
retries from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.protocol.records import BatchHeader

__all__ = ["SEQUENCE_ERRORS", "Refusals"]

SEQUENCE_ERRORS = frozenset({ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id})
"""What the log answers a batch that does not continue its producer's sequence."""

_SEQUENCE_MODULUS = 2**31
_AHEAD = 2**30
"""A sequence at most this far after a refused one (modulo 2**31) comes after it."""


@dataclass(frozen=True, slots=True)
class _Refusal:
    header: BatchHeader
    error: ErrorCode
    why: str


class Refusals:
    """Per producer id, its first in-sequence batch refused since its last admitted one.
    At most `capacity` producers are remembered; beyond that the oldest is forgotten (its
    gap is then answered as the log sees it, as before)."""

    __slots__ = ("_capacity", "_refused")

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        self._refused: dict[int, _Refusal] = {}

    def __len__(self) -> int:
        return len(self._refused)

    def refused(self, headers: Iterable[BatchHeader], error: ErrorCode, why: str) -> None:
        """These batches, each continuing its producer's sequence, were refused with
        `error` and nothing of them was written."""
        for header in headers:
            producer_id = header.producer_id
            if producer_id < 0 or header.base_sequence < 0:
                continue  # not idempotent: no sequence, no gap
            earlier = self._refused.pop(producer_id, None)
            if earlier is not None and earlier.header.producer_epoch == header.producer_epoch:
                self._refused[producer_id] = earlier  # the gap starts at the earlier one
                continue
            if len(self._refused) >= self._capacity:
                del self._refused[next(iter(self._refused))]
            self._refused[producer_id] = _Refusal(header, error, why)

    def admitted(self, headers: Iterable[BatchHeader]) -> None:
        """These batches were written (or answered as duplicates of written ones): their
        producers have no gap of the leader's making any more."""
        if not self._refused:
            return
        for header in headers:
            self._refused.pop(header.producer_id, None)

    def explain(
        self,
        headers: Iterable[BatchHeader],
        error: ErrorCode,
        expects: Callable[[BatchHeader], bool],
    ) -> tuple[ErrorCode, str] | None:
        """The log refused these batches with `error`. If that is a sequence gap that
        starts at a batch refused here, which the log (`expects`) still waits for next,
        the refusal's error and why; else None."""
        if error not in SEQUENCE_ERRORS:
            return None
        for header in headers:
            refusal = self._refused.get(header.producer_id)
            if refusal is None:
                continue
            refused = refusal.header
            if refused.producer_epoch != header.producer_epoch:
                continue
            ahead = (header.base_sequence - refused.base_sequence) % _SEQUENCE_MODULUS
            if 0 < ahead < _AHEAD and expects(refused):
                return refusal.error, (
                    f"{refusal.why}; the batch at sequence {refused.base_sequence} before "
                    "this one was refused, retry from it"
                )
        return None
