"""Random interleavings of plain and transactional commits, markers (written, then
reported durable), deletions, expiry, require_stable fetches, held, completed and failed
writes, and reloads: after every step the committed and pending offsets are what a new
coordinator loading the durable log gets, and what Kafka's rule (the newest written
commit of a partition wins) makes of that log."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from txn_group_harness import Batch, Marker, TxnHarness, assert_matches_replay

from strom.group import offsets, txn_offsets
from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.records import GroupMetadataKey, OffsetCommitValue, Value
from strom.group.state import TopicPartition

GROUPS = ("g", "h")
PRODUCERS = (1, 2, 3)

step = st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.integers(0, 1)),
    st.tuples(st.just("txn"), st.sampled_from(GROUPS), st.integers(0, 2 * len(PRODUCERS) - 1)),
    st.tuples(st.just("marker"), st.sampled_from(PRODUCERS), st.integers(0, 3)),
    st.tuples(st.just("complete"), st.just(0), st.just(0)),
    st.tuples(st.just("delete_offsets"), st.sampled_from(GROUPS), st.integers(0, 1)),
    st.tuples(st.just("delete_group"), st.sampled_from(GROUPS), st.just(0)),
    st.tuples(st.just("expire"), st.just(""), st.integers(0, 20_000)),
    st.tuples(st.just("stable"), st.sampled_from(GROUPS), st.just(0)),
    st.tuples(st.just("hold"), st.just(""), st.booleans()),
    st.tuples(st.just("settle"), st.just(""), st.booleans()),
    st.tuples(st.just("reload"), st.just(""), st.just(0)),
)


Where = tuple[str, TopicPartition]


def kafka_offsets(h: TxnHarness) -> tuple[dict[Where, Value], set[Where]]:
    """Kafka's rule, straight from the durable log: every offset keeps the position of
    its record; a COMMIT marker makes a pending offset the committed one only if it was
    written after the committed one (OffsetMetadataManager.replayEndTransactionMarker).
    Returns the committed offsets and the partitions with pending ones."""
    committed: dict[Where, tuple[Value, int]] = {}
    pending: dict[int, dict[Where, tuple[Value, int]]] = {}
    position = 0
    for entry in h.log:
        position += 1
        if isinstance(entry, Marker):
            if not entry.completed:
                continue
            for where, (value, at) in pending.pop(entry.producer_id, {}).items():
                if entry.commit and (where not in committed or at > committed[where][1]):
                    committed[where] = (value, at)
            continue
        if not entry.durable:
            continue
        for key, value in entry.records:
            position += 1
            if isinstance(key, GroupMetadataKey):
                if value is None:  # strom tombstones a group after all its offsets
                    assert not any(g == key.group_id for g, _ in committed)
                continue
            where = (key.group_id, TopicPartition(key.topic, key.partition))
            if value is None:
                committed.pop(where, None)
                for by_where in pending.values():
                    by_where.pop(where, None)
            elif entry.producer_id >= 0:
                pending.setdefault(entry.producer_id, {})[where] = (value, position)
            else:
                committed[where] = (value, position)
    open_ = {where for by_where in pending.values() for where in by_where}
    return {where: value for where, (value, _) in committed.items()}, open_


def assert_kafka_semantics(h: TxnHarness) -> None:
    expected, open_ = kafka_offsets(h)
    live: dict[Where, OffsetCommitValue] = {}
    live_open: set[Where] = set()
    for group_id, group in h.core.groups.items():
        live.update({(group_id, tp): value for tp, value in group.offsets.items()})
        live_open.update((group_id, tp) for tp in group.pending_offsets)
    assert live == expected
    assert live_open == open_


def _outstanding(h: TxnHarness) -> list[Marker]:
    return [e for e in h.log if isinstance(e, Marker) and not e.completed]


def _settled_before(h: TxnHarness, marker: Marker) -> bool:
    """Every write before the marker in the log is durable: the marker can be."""
    before = h.log[: next(i for i, e in enumerate(h.log) if e is marker)]
    return all(e.durable for e in before if isinstance(e, Batch))


def _reload(h: TxnHarness) -> None:
    """A new leader of the partition: its coordinator loads the log (markers in it are
    applied as they are read; the transaction coordinator's later report is a retry)."""
    for marker in _outstanding(h):
        marker.completed = True
    h.reload()


@settings(max_examples=500, deadline=None)
@given(st.lists(step, min_size=5, max_size=70), st.integers(0, 1000))
@example(  # a write failing after a reload must drop its own batch, not the old one with its id
    steps=[
        ("commit", "g", 0),
        ("commit", "g", 0),
        ("reload", "", 0),
        ("commit", "g", 1),
        ("hold", "", True),
        ("commit", "g", 0),
        ("settle", "", True),
    ],
    seed=0,
)
def test_live_offsets_equal_the_replay_of_the_log(
    steps: list[tuple[str, str | int, int]], seed: int
) -> None:
    h = TxnHarness(seed=seed, offsets_retention_ms=30_000)
    for counter, (action, which, n) in enumerate(steps, start=1):
        awaiting = {m.producer_id for m in _outstanding(h)}
        if action == "commit":
            h.commit(CommitRequest(str(which), offsets=(OffsetToCommit("t", n, counter),)))
        elif action == "txn":
            producer_id, partition = PRODUCERS[n // 2], n % 2
            # The transaction coordinator takes no offsets of a producer whose
            # transaction is ending (AddOffsetsToTxn: CONCURRENT_TRANSACTIONS).
            if producer_id not in awaiting:
                h.txn_commit(producer_id, ("t", partition, counter), group=str(which))
        elif action == "marker":
            assert isinstance(which, int)
            if which not in awaiting:  # n: bit 0 COMMIT, bit 1 durable at once if it can be
                marker = h.marker(which, commit=bool(n & 1), complete=False)
                if n & 2 and marker is _outstanding(h)[0] and _settled_before(h, marker):
                    h.complete_marker(marker)
        elif action == "complete":
            waiting = _outstanding(h)
            if waiting and _settled_before(h, waiting[0]):
                h.complete_marker(waiting[0])
        elif action == "delete_offsets":
            _, _, out = offsets.delete_offsets(
                h.core, str(which), [TopicPartition("t", n)], h.now_ms
            )
            h.run(out)
        elif action == "delete_group":
            h.run(offsets.delete_groups(h.core, [str(which)], h.now_ms)[1])
        elif action == "expire":
            h.now_ms += n
            h.run(offsets.expire(h.core, h.now_ms))
        elif action == "stable":
            h.run(txn_offsets.stable_fetch(h.core, str(which), None, h.now_ms)[1])
        elif action == "hold":
            h.hold = bool(n)
        elif action == "settle" and h.held:
            # The log makes writes durable in order; the oldest may fail instead.
            (h.fail if n else h.complete)(h.held[0])
        elif action == "reload" and not h.held:
            _reload(h)
        assert_matches_replay(h)
        assert_kafka_semantics(h)
    h.hold = False
    while h.held:
        h.complete(h.held[0])
    for marker in _outstanding(h):
        h.complete_marker(marker)
    assert_matches_replay(h)
    assert_kafka_semantics(h)
