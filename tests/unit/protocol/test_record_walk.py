"""The produce path's record walk: the compiled one (strom.protocol._walk) answers exactly
as the Python one, on valid record sequences, on their corruptions and on any bytes."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import records
from strom.protocol.batch_header import MIN_RECORD_BODY
from strom.protocol.records import record_lengths_fill_python

MIN_VARINT = 2 * MIN_RECORD_BODY

try:
    from strom.protocol._walk import record_lengths_fill as compiled
except ImportError:  # no C compiler at install time
    compiled = None

needs_compiled = pytest.mark.skipif(compiled is None, reason="strom.protocol._walk not built")


def zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = encoded & 0x7F
        encoded >>= 7
        if encoded:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@st.composite
def record_runs(draw: st.DrawFn) -> tuple[bytes, int, int, int]:
    """Length-prefixed records (some long enough for 2- and 3-byte varints) between
    some prefix and suffix, maybe corrupted at one byte; (data, pos, end, count)."""
    bodies = draw(
        st.lists(st.integers(MIN_RECORD_BODY, 300) | st.integers(8_000, 20_000), max_size=20)
    )
    prefix = draw(st.binary(max_size=8))
    run = b"".join(zigzag_varint(n) + bytes(n) for n in bodies)
    data = bytearray(prefix + run + draw(st.binary(max_size=8)))
    if data and draw(st.booleans()):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    count = len(bodies) + draw(st.sampled_from([0, 0, 0, -1, 1]))
    return bytes(data), len(prefix), len(prefix) + len(run), max(count, 0)


@needs_compiled
@settings(max_examples=500)
@given(record_runs())
def test_compiled_and_python_walks_agree_on_records(case: tuple[bytes, int, int, int]) -> None:
    data, pos, end, count = case
    assert compiled is not None
    assert compiled(data, pos, end, count, MIN_VARINT) == record_lengths_fill_python(
        data, pos, end, count
    )


@needs_compiled
@given(st.binary(max_size=64), st.integers(0, 70), st.integers(0, 70), st.integers(0, 12))
def test_compiled_and_python_walks_agree_on_any_bytes(
    data: bytes, pos: int, end: int, count: int
) -> None:
    assert compiled is not None
    end = max(end, pos)
    assert compiled(data, pos, end, count, MIN_VARINT) == record_lengths_fill_python(
        data, pos, end, count
    )
    assert compiled(bytearray(data), pos, end, count, MIN_VARINT) == compiled(
        memoryview(data), pos, end, count, MIN_VARINT
    )


def test_valid_records_fill_their_batch_on_either_path() -> None:
    run = b"".join(zigzag_varint(n) + bytes(n) for n in (6, 100, 9_000))
    assert record_lengths_fill_python(run, 0, len(run), 3)
    assert not record_lengths_fill_python(run, 0, len(run), 2)
    assert not record_lengths_fill_python(run[:-1], 0, len(run) - 1, 3)
    if compiled is not None:
        assert compiled(run, 0, len(run), 3, MIN_VARINT)
        assert not compiled(run[:-1], 0, len(run) - 1, 3, MIN_VARINT)


def test_ci_builds_the_compiled_walk() -> None:
    """CI installs with a C compiler, so the produce path there runs compiled."""
    if os.environ.get("CI") != "true" or os.environ.get("STROM_PURE_PYTHON") == "1":
        pytest.skip("only CI promises a compiler")
    assert records.COMPILED_WALK
