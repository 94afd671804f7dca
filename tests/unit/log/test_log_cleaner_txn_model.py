"""Compaction of random interleavings of plain and idempotent records, committed,
aborted and open transactions (of the same keys and producers), rolls, passes and
restarts - clean, crashed, crashed with every snapshot, `.txnindex` and the recovery
point lost, or with the newest snapshot lost - against a plain model of what was
written; each example ends its transactions and runs two passes, the second past the
delete horizon.

After every step: read_uncommitted misses only records of aborted transactions,
records shadowed by a later plain or committed record of their key, and tombstones, all
below the last stable offset; the last committed value of every key is there;
read_committed sees exactly the records read_uncommitted sees that are below the last
stable offset and not aborted (its aborted-transaction lists hide the rest); a marker
is gone only when no batch of its transaction is left and ``delete.retention.ms`` has
passed since a pass first found it so; the `.txnindex` lists every aborted transaction
that keeps a batch, and only aborted transactions whose marker is there; and a restart
agrees with what was read before it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cleaner_helpers import clean, keyed_batch, open_log
from cleaner_txn_helpers import (
    Entry,
    end_marker,
    read_committed,
    read_uncommitted,
    stored_batches,
    txn_records,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from strom.log import PartitionLog

PRODUCERS = (10, 11, 12)
KEYS = (b"k0", b"k1", b"k2")

_records = st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=2)
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(-1, 2), _records),
        st.tuples(st.just("txn"), st.integers(0, 2), _records),
        st.tuples(st.just("txn"), st.integers(0, 2), _records),
        st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("end"), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("clean"), st.booleans(), st.sampled_from([0, 400, 1_000, 2_500])),
        st.tuples(st.just("reopen"), st.sampled_from(["clean", "crash", "lost", "newest"])),
    ),
    min_size=8,
    max_size=30,
)
"""A "clean" op rolls the active segment first when its flag is set."""


@dataclass(slots=True)
class Model:
    """What was written: records, transactions (by number) and markers."""

    # Transitions: (put | txn | end)*, in offset order; markers_seen_empty grows.
    end: int = 0
    records: dict[int, tuple[bytes, bytes | None, int | None]] = field(default_factory=dict)
    """offset -> (key, value, transaction number or None)."""
    producer_of: dict[int, int] = field(default_factory=dict)
    outcome: dict[int, bool | None] = field(default_factory=dict)
    """Transaction -> committed (None: open)."""
    batches: dict[int, set[int]] = field(default_factory=dict)
    """Transaction -> base offsets of its batches."""
    markers: dict[int, int | None] = field(default_factory=dict)
    """Marker offset -> its transaction (None: a marker with none open)."""
    open_txn: dict[int, int] = field(default_factory=dict)
    sequence: dict[int, int] = field(default_factory=dict)
    first_empty_ms: dict[int, int] = field(default_factory=dict)
    """Marker offset -> time of the first pass after which its transaction had no batch."""

    def lso(self) -> int:
        firsts = [min(self.batches[txn]) for txn in self.open_txn.values()]
        return min([self.end, *firsts])

    def aborted(self, offset: int) -> bool:
        txn = self.records[offset][2]
        return txn is not None and self.outcome[txn] is False

    def stable(self, offset: int) -> bool:
        """Plain, or of a committed transaction."""
        txn = self.records[offset][2]
        return txn is None or self.outcome[txn] is True


@dataclass(frozen=True, slots=True)
class Seen:
    """What the checks read of the log."""

    uncommitted: list[Entry]
    committed: list[Entry]
    last_stable_offset: int
    producers: dict[int, tuple[int, int] | None]
    """Producer id -> (epoch, last sequence)."""
    markers: set[int]
    """Offsets of the markers in the log."""
    txns_with_batches: set[int]

    def readers_view(self) -> tuple[object, ...]:
        """What a restart must not change."""
        return self.uncommitted, self.committed, self.last_stable_offset, self.producers


def values(op: tuple[object, ...], first: int) -> list[tuple[bytes, bytes | None]]:
    return [
        (KEYS[key], None if tomb else b"v%d" % (first + i))
        for i, (key, tomb) in enumerate(op[-1])  # type: ignore[arg-type]
    ]


def apply(log: PartitionLog, model: Model, op: tuple[object, ...]) -> None:
    if op[0] == "put":  # plain, or of an idempotent producer not in a transaction
        pid = -1 if op[1] == -1 else PRODUCERS[op[1]]  # type: ignore[call-overload]
        if pid in model.open_txn:
            return
        records = values(op, model.end)
        sequence = model.sequence.get(pid, 0) if pid >= 0 else -1
        batch = keyed_batch(
            records, producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=sequence
        )
        log.append([batch], now_ms=0, leader_epoch=0)
        if pid >= 0:
            model.sequence[pid] = sequence + len(records)
        for key, value in records:
            model.records[model.end] = (key, value, None)
            model.end += 1
    elif op[0] == "txn":
        pid = PRODUCERS[op[1]]  # type: ignore[call-overload]
        records = values(op, model.end)
        sequence = model.sequence.get(pid, 0)
        log.append([txn_records(pid, records, sequence=sequence)], now_ms=0, leader_epoch=0)
        model.sequence[pid] = sequence + len(records)
        txn = model.open_txn.setdefault(pid, len(model.outcome))
        model.outcome.setdefault(txn, None)
        model.producer_of[txn] = pid
        model.batches.setdefault(txn, set()).add(model.end)
        for key, value in records:
            model.records[model.end] = (key, value, txn)
            model.end += 1
    else:
        pid = PRODUCERS[op[1]]  # type: ignore[call-overload]
        commit = bool(op[2])
        log.append([end_marker(pid, commit=commit)], now_ms=0, leader_epoch=0)
        txn = model.open_txn.pop(pid, None)
        if txn is not None:
            model.outcome[txn] = commit
        model.markers[model.end] = txn
        model.end += 1


def check(log: PartitionLog, model: Model) -> Seen:
    """Check the log against the model; returns what was read."""
    lso = model.lso()
    assert log.log_end_offset == model.end
    assert log.last_stable_offset(model.end) == lso
    opened = {pid: min(model.batches[txn]) for pid, txn in model.open_txn.items()}
    assert log.open_transactions() == opened
    uncommitted = read_uncommitted(log)
    present = {offset for offset, _, _ in uncommitted}
    for offset, key, value in uncommitted:
        assert model.records[offset][:2] == (key, value)
    latest: dict[bytes, int] = {}
    for offset in sorted(model.records):
        if offset < lso and model.stable(offset):
            latest[model.records[offset][0]] = offset
    for offset, (key, value, _) in model.records.items():
        if offset in present:
            continue
        assert offset < lso, f"record {offset} at or above the LSO {lso} went"
        shadowed = latest.get(key, -1) > offset
        assert model.aborted(offset) or shadowed or value is None, f"record {offset} went"
    for key, offset in latest.items():
        assert offset in present or model.records[offset][1] is None, f"{key!r} lost"
    committed = read_committed(log)
    assert committed == [e for e in uncommitted if e[0] < lso and not model.aborted(e[0])]
    batches = stored_batches(log)
    kept_markers = {h.base_offset for h, _ in batches if h.is_control and h.records_count}
    has_batch = {
        txn
        for txn, offsets in model.batches.items()
        for h, _ in batches
        if h.base_offset in offsets and h.producer_id == model.producer_of[txn]
    }
    for offset, txn in model.markers.items():
        if offset not in kept_markers:
            assert txn not in has_batch, f"marker {offset} went before its transaction"
    entries = {(t.producer_id, t.last_offset) for t in log.aborted_transactions(0, model.end)}
    aborted_markers = {
        (model.producer_of[txn], offset): txn
        for offset, txn in model.markers.items()
        if txn is not None and model.outcome[txn] is False
    }
    assert entries <= {key for key in aborted_markers if key[1] in kept_markers}
    assert {key for key, txn in aborted_markers.items() if txn in has_batch} <= entries
    producers = {pid: log.producer_state_for(pid) for pid in PRODUCERS}
    return Seen(
        uncommitted,
        committed,
        lso,
        {pid: None if e is None else (e.epoch, e.last_seq) for pid, e in producers.items()},
        kept_markers,
        has_batch,
    )


def check_pass(model: Model, before: Seen, after: Seen, now_ms: int, retention_ms: int) -> None:
    """After a pass at ``now_ms``: a marker it removed had waited ``retention_ms`` since an
    earlier pass found its transaction without a batch; note those this pass found so."""
    for offset in before.markers - after.markers:
        assert offset in model.first_empty_ms, f"marker {offset} went in the pass emptying it"
        assert now_ms >= model.first_empty_ms[offset] + retention_ms, f"marker {offset}"
    for offset in after.markers:
        txn = model.markers[offset]
        if txn is None or txn not in after.txns_with_batches:
            model.first_empty_ms.setdefault(offset, now_ms)


def reopen(log: PartitionLog, how: str, config: dict[str, int]) -> PartitionLog:
    path = log.directory
    log.close(clean=how == "clean")
    if how == "lost":
        for pattern in ("*.snapshot", "*.txnindex", "recovery-point"):
            for file in path.glob(pattern):
                file.unlink()
    elif how == "newest":
        snapshots = sorted(path.glob("*.snapshot"))
        if snapshots:
            snapshots[-1].unlink()
    return open_log(path, **config)


@dataclass(slots=True)
class Run:
    """One example: the log, the model, the clock and what was last read."""

    # Transitions: created -> step()* -> the log closed by the test.
    log: PartitionLog
    config: dict[str, int]
    model: Model = field(default_factory=Model)
    now_ms: int = 0
    seen: Seen | None = None

    def step(self, op: tuple[object, ...]) -> None:
        if op[0] == "clean":
            if op[1]:
                self.log.roll(self.now_ms)
            self.now_ms += int(op[2])  # type: ignore[call-overload]
            clean(self.log, self.now_ms)
            after = check(self.log, self.model)
            assert self.seen is not None
            check_pass(
                self.model, self.seen, after, self.now_ms, self.config["delete_retention_ms"]
            )
        elif op[0] == "reopen":
            self.log = reopen(self.log, str(op[1]), self.config)
            assert self.seen is not None
            assert check(self.log, self.model).readers_view() == self.seen.readers_view(), op
        else:
            apply(self.log, self.model, op)
        self.seen = check(self.log, self.model)


@settings(max_examples=30, deadline=None)
@example(  # a producer's stray marker, its last batch, outlives a restart and two passes
    ops=[*[("put", -1, [(0, False)])] * 7, ("end", 0, False), ("reopen", "clean")],
    segment_bytes=250,
    delete_retention_ms=0,
)
@example(  # a snapshot holding open the transaction whose marker a pass removes
    ops=[
        ("txn", 0, [(0, False)]),
        ("clean", True, 0),  # the roll's snapshot: producer 10's transaction is open
        ("end", 0, False),
        ("put", 0, [(1, False)]),  # producer 10 goes on without a transaction
        ("clean", True, 0),
        ("clean", False, 2_500),  # the aborted transaction's marker goes
        ("reopen", "newest"),  # and the state comes from an older snapshot
    ],
    segment_bytes=900,
    delete_retention_ms=1_000,
)
@given(
    ops=_ops,
    segment_bytes=st.integers(250, 900),
    delete_retention_ms=st.sampled_from([0, 1_000]),
)
def test_cleaning_transactions_matches_a_model(
    ops: list[tuple[object, ...]], segment_bytes: int, delete_retention_ms: int
) -> None:
    config = {
        "segment_bytes": segment_bytes,
        "index_interval_bytes": 64,
        "delete_retention_ms": delete_retention_ms,
    }
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(open_log(Path(tmp) / "p", **config), config)
        try:
            run.seen = check(run.log, run.model)
            for op in ops:
                run.step(op)
            # then every transaction ends, and two passes: the second one past the
            # delete horizon of the markers the first found without a batch
            for pid in sorted(run.model.open_txn):
                run.step(("end", PRODUCERS.index(pid), pid % 2 == 0))
            run.step(("clean", True, 0))
            run.step(("clean", False, delete_retention_ms + 1))
            run.step(("reopen", "lost"))
        finally:
            run.log.close(clean=False)
