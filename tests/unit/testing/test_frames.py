"""FrameSplitter: any cut of a client's byte stream gives back the same frames."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from strom.testing.frames import FrameSplitter

MAX = 1 << 12


def frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


frames = st.lists(st.binary(min_size=8, max_size=300).map(frame), max_size=8)


def split(stream: bytes, cuts: list[int]) -> tuple[list[bytes], FrameSplitter]:
    splitter = FrameSplitter(MAX)
    out: list[bytes] = []
    start = 0
    for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
        out += splitter.feed(stream[start:cut])
        start = max(start, cut)
    return out, splitter


@given(frames, st.lists(st.integers(min_value=0), max_size=20))
def test_any_chunking_gives_back_the_frames(whole: list[bytes], cuts: list[int]) -> None:
    out, splitter = split(b"".join(whole), cuts)
    assert out == whole
    assert not splitter.passing and splitter.take_rest() == b""


@given(
    frames,
    st.integers().filter(lambda size: not 8 <= size <= MAX),
    st.binary(max_size=50),
    st.lists(st.integers(min_value=0), max_size=10),
)
def test_a_size_it_will_not_read_passes_everything_after_the_good_frames(
    whole: list[bytes], bad_size: int, tail: bytes, cuts: list[int]
) -> None:
    bad = struct.pack(">i", max(min(bad_size, 2**31 - 1), -(2**31))) + tail
    out, splitter = split(b"".join(whole) + bad, cuts)
    assert out == whole
    assert splitter.passing
    assert splitter.take_rest() == bad


def test_a_partial_frame_waits_for_the_rest() -> None:
    splitter = FrameSplitter(MAX)
    whole = frame(b"x" * 20)
    assert splitter.feed(whole[:3]) == []
    assert splitter.feed(whole[3:10]) == []
    assert splitter.feed(whole[10:] + whole[:5]) == [whole]
    assert splitter.take_rest() == whole[:5]
