"""Metadata entries packed into ZooKeeper multi-ops that the server accepts. No I/O.

    batches([(entry, ops), ...], budget) -> [Batch(ops, done), ...]

ZooKeeper refuses (by closing the connection) any request larger than its `jute.maxbuffer`,
1 MiB by default. One entry's ops can be larger than that (a CreateTopics of 1,000 topics
is about 1.3 MB), and many small entries queued behind each other need not cost a round
trip each. So the entries waiting to be written are packed in order: whole entries share
a multi-op while they fit in `budget` bytes; an entry larger than the budget alone is cut
into several, in order, each applied by ZooKeeper atomically but not all of them together
(a controller that dies between them leaves part of its last decision, which its successor
reads back as an operator's topic would be: see docs/metadata-stores.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from strom.metadata.znodes import ZnodeOp

T = TypeVar("T")

DEFAULT_BUDGET_BYTES = 512 * 1024
"""Half of ZooKeeper's default jute.maxbuffer: room for the estimate's error and the
multi-op's own framing."""
_OP_OVERHEAD_BYTES = 64
"""Per op beyond its path and data: the op header, string lengths, a create's ACL
(world:anyone) and flags, a version. The largest (a create) is about 50 bytes."""


def op_size(op: ZnodeOp) -> int:
    """An upper estimate of the bytes `op` takes in a multi-op request."""
    return len(op.path.encode()) + len(op.data) + _OP_OVERHEAD_BYTES


@dataclass(slots=True)
class Batch(Generic[T]):
    """One multi-op: `ops` in order, and the entries whose last op is among them (or that
    have none), which are written once it succeeds."""

    ops: list[ZnodeOp] = field(default_factory=list)
    done: list[T] = field(default_factory=list)
    size: int = 0


def batches(entries: Sequence[tuple[T, Sequence[ZnodeOp]]], budget: int) -> list[Batch[T]]:
    """`entries` (each with its ops, in order) packed into multi-ops of at most `budget`
    estimated bytes each, except where one op alone is larger. Every entry is in the
    `done` of exactly one batch, in order; the ops keep their order."""
    if budget <= 0:
        raise ValueError(f"budget must be positive, got {budget}")
    packed: list[Batch[T]] = [Batch()]
    for entry, ops in entries:
        sizes = [op_size(op) for op in ops]
        current = packed[-1]
        if current.ops and current.size + sum(sizes) > budget:
            current = Batch()
            packed.append(current)
        for op, size in zip(ops, sizes, strict=True):
            if current.ops and current.size + size > budget:
                current = Batch()
                packed.append(current)
            current.ops.append(op)
            current.size += size
        current.done.append(entry)
    return packed if packed[0].ops or packed[0].done else []
