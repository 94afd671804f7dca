"""The pure decisions of the exactly-once sink: which transactional id a task uses, where it
records that its part of a batch is written, and whether a task is a replay to skip.

Each write task writes its rows in one Kafka transaction whose transactional id depends on
the write's prefix, the task's Spark partition id and the task's attempt number. The
attempt is part of it because Spark does not stop a failed attempt's Python worker
before it starts the next attempt: a late attempt 0 that took an id shared by all
attempts would fence attempt 1 after attempt 1 wrote everything, and the driver's commit
would fail. With one id per attempt no attempt can fence a newer one. A retry aborts the
transactions of the attempts before it; the driver aborts those of the attempts it does
not commit (every open transaction of the write's prefix, `of_write`). Inside its
transaction the task commits an offset for a consumer group of its task position (the
"slot", shared by every attempt): offset batch id + 1. A task first reads that offset
(read_committed); if it already covers its batch, the records of this (batch, partition)
are committed, and it writes nothing.

Spark replays a streaming micro-batch with the same batch id and the same input offsets,
so a replayed task gets the same rows as the one it replaces when the plan is
deterministic; see docs/spark.md for what that takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The topic partition the slot's offset is committed on. Every Kafka broker has it, a
# group coordinator accepts offsets for it, and a write's own topics may be chosen per row
# (the `topic` column), so none of them can serve.
SLOT_TOPIC = "__consumer_offsets"
SLOT_PARTITION = 0
# A batch write has no batch id; it is batch 0 of its prefix, so a batch write run again
# with the same transactionalIdPrefix skips the tasks that committed before.
BATCH_WRITE_ID = 0
# Spark's local properties, set by a streaming query on every task it runs.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
# transactional.id and group.id are strings of at most 249 characters in practice (Kafka
# refuses none, but topic-style limits keep them printable in every tool).
MAX_PREFIX_CHARS = 200
_TASK_SUFFIX = re.compile(r"[0-9]+(-a[0-9]+)?", re.ASCII)


@dataclass(frozen=True, slots=True)
class TaskSlot:
    """Where one task's part of a write lives: its transactional id and its marker group."""

    transactional_id: str
    group_id: str
    batch_id: int
    earlier_ids: tuple[str, ...] = ()
    """The ids of the task's earlier attempts, which it aborts before it reads its marker:
    a failed attempt's worker may have left its marker offset pending in a transaction,
    and the read (read_committed) waits for that transaction to end."""

    @property
    def marker_offset(self) -> int:
        """The offset committed in the task's transaction: batch id + 1 (0 means none)."""
        return self.batch_id + 1

    def already_written(self, committed_offset: int | None) -> bool:
        """True if a committed transaction of this slot covers this batch (or a later one).

        `committed_offset` is the group's committed offset, None or negative when it has
        none. Spark replays only the batch that did not finish, so a later one is not
        expected; it would mean this batch was done long ago, and is skipped too.
        """
        return committed_offset is not None and committed_offset >= self.marker_offset


def default_prefix(query_id: str) -> str:
    """A streaming query's prefix when none is given: its id, kept in the checkpoint, so it
    is the same when the query restarts from its checkpoint and differs between queries."""
    return f"strom-spark-{query_id}"


def task_slot(prefix: str, partition_id: int, batch_id: int, attempt: int) -> TaskSlot:
    """The slot of attempt `attempt` of Spark partition `partition_id` of a write with
    `prefix`, at `batch_id`.

    The ids do not depend on the batch id: micro-batches of one query never run side by
    side, and a few ids per task position keep __transaction_state small (Spark numbers
    a task's attempts from 0 in every stage, up to spark.task.maxFailures). The group
    does not depend on the attempt: whichever attempt committed, a replay must see it.
    """
    if partition_id < 0:
        raise ValueError(f"partition id {partition_id} is negative")
    if batch_id < 0:
        raise ValueError(f"batch id {batch_id} is negative")
    if attempt < 0:
        raise ValueError(f"attempt {attempt} is negative")
    group = f"{prefix}-p{partition_id}"
    return TaskSlot(
        transactional_id=f"{group}-a{attempt}",
        group_id=group,
        batch_id=batch_id,
        earlier_ids=tuple(f"{group}-a{earlier}" for earlier in range(attempt)),
    )


def of_write(prefix: str, transactional_id: str) -> bool:
    """True if `transactional_id` is one that a task of the write with `prefix` uses:
    `<prefix>-p<n>-a<m>`, or `<prefix>-p<n>` (the ids before attempts were part of it,
    which a query restarted from an older checkpoint may have left open)."""
    rest = transactional_id.removeprefix(f"{prefix}-p")
    return rest != transactional_id and _TASK_SUFFIX.fullmatch(rest) is not None


def batch_id_of(text: str | None) -> int | None:
    """Spark's batch id property as a number; None when it is missing or malformed."""
    if text is None or not text.isascii() or not text.isdigit():
        return None
    return int(text)
