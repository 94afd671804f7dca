"""Compaction against a model, and the pieces a pass is built from."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cleaner_helpers import Entry, clean, keyed_batch, open_log, put, read_all, stored_headers
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.log.cleaner_checkpoint import MAX_PASSES, CleanerCheckpoint
from strom.log.offset_map import OffsetMap
from strom.log.record_filter import batch_records, empty_batch, rewrite_batch
from strom.protocol.records import Compression, RecordsError, decode_batch

_put = st.tuples(
    st.just("put"),
    st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=3),
    st.sampled_from([Compression.NONE, Compression.LZ4, Compression.GZIP]),
)
_ops = st.lists(
    st.one_of(
        _put,
        _put,
        _put,
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean"), st.integers(0, 300)),
        st.tuples(st.just("reopen"), st.booleans()),
    ),
    max_size=50,
)


def check_against_model(log_entries: list[Entry], written: dict[int, Entry], cleaned: int) -> None:
    offsets = [entry[0] for entry in log_entries]
    assert offsets == sorted(set(offsets))
    for entry in log_entries:
        assert written[entry[0]] == entry  # every record read is one written, unchanged
    present = set(log_entries)
    latest: dict[bytes | None, Entry] = {}
    for offset in sorted(written):
        latest[written[offset][1]] = written[offset]
    for key, entry in latest.items():
        if entry[2] is not None:
            assert entry in present  # the last value of every key is always there
        elif entry not in present:  # a tombstone past its horizon: the key is gone
            assert not [e for e in log_entries if e[1] == key]
    cleaned_keys = [key for offset, key, _ in log_entries if offset < cleaned]
    assert len(cleaned_keys) == len(set(cleaned_keys))  # the cleaned part: one per key


@settings(max_examples=80, deadline=None)
@given(
    ops=_ops,
    segment_bytes=st.integers(150, 1_500),
    delete_retention_ms=st.sampled_from([0, 100, 10**9]),
    map_budget_bytes=st.sampled_from([1, 500, 1 << 30]),
)
def test_cleaning_matches_a_model(
    ops: list[tuple[object, ...]],
    segment_bytes: int,
    delete_retention_ms: int,
    map_budget_bytes: int,
) -> None:
    config = {
        "segment_bytes": segment_bytes,
        "index_interval_bytes": 64,
        "delete_retention_ms": delete_retention_ms,
    }
    tmp = tempfile.mkdtemp()
    try:
        directory = Path(tmp) / "p"
        log = open_log(directory, **config)
        written: dict[int, Entry] = {}
        now_ms = 0
        for op in ops:
            if op[0] == "put":
                records = [
                    (f"k{key}".encode(), None if tomb else f"v{len(written) + i}".encode())
                    for i, (key, tomb) in enumerate(op[1])  # type: ignore[arg-type]
                ]
                batch = keyed_batch(records, timestamp_ms=now_ms, compression=op[2])  # type: ignore[arg-type]
                base = log.append([batch], now_ms=now_ms, leader_epoch=0).base_offset
                for i, (key, value) in enumerate(records):
                    written[base + i] = (base + i, key, value)
            elif op[0] == "roll":
                log.roll(now_ms)
            elif op[0] == "clean":
                now_ms += int(op[1])  # type: ignore[call-overload]
                clean(log, now_ms, map_budget_bytes=map_budget_bytes)
            else:
                entries = read_all(log)
                log.close(clean=bool(op[1]))
                log = open_log(directory, **config)
                assert read_all(log) == entries
            check_against_model(read_all(log), written, log.cleaner_checkpoint.cleaned_offset)
            assert (log.log_start_offset, log.log_end_offset) == (0, len(written))
        log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_an_idempotent_producer_survives_cleaning_and_a_lost_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    for seq in range(3):  # producer 7 writes k0 three times; a plain producer overwrites it
        batch = keyed_batch(
            [(b"k0", f"p{seq}".encode())], producer_id=7, producer_epoch=2, base_sequence=seq
        )
        log.append([batch], now_ms=0, leader_epoch=0)
    put(log, b"k0", b"plain")
    log.roll(0)
    clean(log, now_ms=0)
    headers = stored_headers(log)
    # the producer's last batch stays, empty; its earlier ones go
    assert [(h.base_offset, h.producer_id, h.records_count) for h in headers] == [
        (2, 7, 0),
        (3, -1, 1),
    ]
    log.close(clean=False)
    for snapshot in (tmp_path / "p").glob("*.snapshot"):
        snapshot.unlink()
    reopened = open_log(tmp_path / "p")
    entry = reopened.producer_state_for(7)
    assert entry is not None and (entry.epoch, entry.last_seq) == (2, 2)
    retry = keyed_batch([(b"k0", b"p2")], producer_id=7, producer_epoch=2, base_sequence=2)
    assert reopened.append([retry], now_ms=0, leader_epoch=0).duplicate
    follow = keyed_batch([(b"k1", b"p3")], producer_id=7, producer_epoch=2, base_sequence=3)
    assert reopened.append([follow], now_ms=0, leader_epoch=0).base_offset == 4
    reopened.close()


# ---------------------------------------------------------------------------- pieces


def test_checkpoint_first_cleaned_times_and_bounds() -> None:
    checkpoint = CleanerCheckpoint()
    assert checkpoint.first_cleaned_ms(0, 99) == 99
    checkpoint = checkpoint.after_pass(10, 1_000, -1).after_pass(25, 2_000, 1_000)
    assert checkpoint.cleaned_offset == 25
    assert [checkpoint.first_cleaned_ms(o, 99) for o in (0, 9, 10, 24, 25)] == [
        1_000,
        1_000,
        2_000,
        2_000,
        99,
    ]
    assert checkpoint.after_pass(25, 3_000, -1).passes == checkpoint.passes  # no progress
    assert CleanerCheckpoint.from_bytes(checkpoint.to_bytes()) == checkpoint
    cut = checkpoint.truncated(15)
    assert cut.cleaned_offset == 15 and cut.passes == ((10, 1_000), (15, 2_000))
    assert checkpoint.truncated(30) is checkpoint
    many = CleanerCheckpoint()
    for i in range(MAX_PASSES + 5):
        many = many.after_pass((i + 1) * 10, i, -1)
    assert len(many.passes) == MAX_PASSES
    # offsets of merged-away passes count as first cleaned by the oldest kept: later
    assert many.first_cleaned_ms(0, 10**9) == 5


def test_offset_map_keeps_the_latest_offset_and_estimates_its_size() -> None:
    offsets = OffsetMap(budget_bytes=300)
    offsets.put(b"a", 1)
    offsets.put(b"a", 5)
    assert (offsets.latest(b"a"), offsets.latest(b"b"), len(offsets)) == (5, None, 1)
    assert not offsets.full
    offsets.put(b"bb", 6)
    offsets.put(b"ccc", 7)
    assert offsets.full and offsets.estimated_bytes >= 300


def test_rewrite_keeps_record_bytes_and_header_fields() -> None:
    for codec in Compression:
        view, header = keyed_batch(
            [(b"a", b"1"), (b"b", None), (b"c", b"3")],
            timestamp_ms=500,
            compression=codec,
            producer_id=3,
            producer_epoch=1,
            base_sequence=10,
        )
        data, records = batch_records(view, header)
        assert [(r[2], r[4], r[5]) for r in records] == [
            (0, b"a", False),
            (1, b"b", True),
            (2, b"c", False),
        ]
        rewritten = rewrite_batch(header, data, [records[0], records[1]])
        new_header, kept = decode_batch(rewritten)
        assert new_header.compression == codec
        assert (new_header.last_offset_delta, new_header.records_count) == (2, 2)
        assert (new_header.base_sequence, new_header.last_sequence) == (10, 12)
        assert new_header.max_timestamp == 501
        assert [(r.offset, r.key, r.value) for r in kept] == [(0, b"a", b"1"), (1, b"b", None)]
        empty_header, none = decode_batch(empty_batch(header))
        assert none == [] and empty_header.compression == Compression.NONE
        assert empty_header.last_offset == header.last_offset


def test_record_scanner_refuses_garbage() -> None:
    view, header = keyed_batch([(b"a", b"1")])
    damaged = bytearray(view)
    damaged[-3] ^= 0xFF
    try:
        batch_records(damaged, header)
    except RecordsError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a CRC mismatch went unnoticed")
