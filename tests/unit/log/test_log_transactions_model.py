"""Random sequences of data batches, markers, truncations, rolls and restarts (clean,
crashed, crashed with the indexes and snapshots lost): the log's open transactions,
`.txnindex` entries and last stable offset always match a replay of its batches."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from txn_log_helpers import TxnModel, all_aborted, batches_for, open_log

from strom.log import PartitionLog

_SEGMENT_BYTES = 400

operation = st.one_of(
    st.tuples(st.just("data"), st.integers(-1, 3), st.integers(1, 3)),
    st.tuples(st.just("marker"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
    st.tuples(st.sampled_from(["clean", "crash", "lost"]), st.just(0), st.just(0)),
)


def reopen(log: PartitionLog, path: Path, how: str) -> PartitionLog:
    if how == "clean":
        log.close()
    else:
        log.close(clean=False)
    if how == "lost":
        for name in ("*.txnindex", "*.snapshot", "recovery-point"):
            for file in path.glob(name):
                file.unlink()
    return open_log(path, segment_bytes=_SEGMENT_BYTES)


def check(log: PartitionLog, model: TxnModel) -> None:
    open_txns, aborted = model.replay()
    assert log.log_end_offset == model.end
    assert log.open_transactions() == open_txns
    assert all_aborted(log) == aborted
    assert log.last_stable_offset(model.end) == model.last_stable_offset(model.end)


@settings(max_examples=200, deadline=None)
@given(st.lists(operation, max_size=40))
def test_a_log_knows_its_transactions_as_a_replay_of_its_batches(
    operations: list[tuple[str, object, object]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p"
        log = open_log(path, segment_bytes=_SEGMENT_BYTES)
        model = TxnModel()
        try:
            for kind, a, b in operations:
                if kind == "data":
                    assert isinstance(a, int) and isinstance(b, int)
                    model.add(a, b, None)
                    log.append(batches_for(model.entries[-1:]), now_ms=0, leader_epoch=0)
                elif kind == "marker":
                    assert isinstance(a, int) and isinstance(b, bool)
                    model.add(a, 1, b)
                    log.append(batches_for(model.entries[-1:]), now_ms=0, leader_epoch=0)
                elif kind == "truncate":
                    assert isinstance(a, float)
                    offset = int(a * model.end)
                    model.truncate(offset)
                    log.truncate_to(offset)
                elif kind == "roll":
                    log.roll(now_ms=0)
                else:
                    log = reopen(log, path, kind)
                check(log, model)
        finally:
            log.close(clean=False)
