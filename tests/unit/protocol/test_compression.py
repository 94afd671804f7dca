"""Codecs: every framing real clients write decodes, and nothing expands past its bound."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    DecompressionError,
    compress,
    decompress,
)
from strom.protocol.records import BATCH_HEADER_SIZE, encode_batch

MiB = 1024 * 1024
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
TEXT = b"".join(b"record %d of a batch, value %d;" % (i, i * 7919 % 1000) for i in range(20_000))
SKIPPABLE = bytes.fromhex("522a4d18") + struct.pack("<I", 3) + b"abc"
# Written by the lz4 1.9.4 and zstd 1.5.4 command line tools from b"strom " * 50, for
# the header fields cramjam's encoders never set: content size and checksums.
SMALL = b"strom " * 50
LZ4_CONTENT_SIZE = bytes.fromhex(
    "04224d186c402c0100000000000054110000006f7374726f6d200600ff0f5074726f6d2000000000f9689e07"
)
LZ4_BLOCK_CHECKSUM = bytes.fromhex(
    "04224d187c402c01000000000000fa110000006f7374726f6d200600ff0f5074726f6d20609a5126"
    "00000000f9689e07"
)
ZSTD_CHECKSUM = bytes.fromhex("28b52ffd642c006d0000307374726f6d20010023514b111e8fbfec")


def _gzip_members(data: bytes) -> bytes:
    half = len(data) // 2
    return zlib.compress(data[:half], wbits=31) + zlib.compress(data[half:], wbits=31)


def _raw_snappy(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


def _lz4_independent(data: bytes) -> bytes:
    """Independent blocks with block checksums, as the Java client and librdkafka write."""
    encoder = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    encoder.compress(data)
    return bytes(encoder.finish())


def _lz4_two_frames(data: bytes) -> bytes:
    half = len(data) // 2
    return compress(Compression.LZ4, data[:half]) + SKIPPABLE + _lz4_independent(data[half:])


def _zstd_streamed(data: bytes) -> bytes:
    """No content size in the frame header, as zstd-jni's stream writes it."""
    encoder = cramjam.zstd.Compressor()
    encoder.compress(data)
    return bytes(encoder.finish())


def _zstd_two_frames(data: bytes) -> bytes:
    half = len(data) // 2
    return compress(Compression.ZSTD, data[:half]) + SKIPPABLE + _zstd_streamed(data[half:])


ENCODERS: dict[str, tuple[Compression, Callable[[bytes], bytes]]] = {
    "gzip": (Compression.GZIP, lambda data: compress(Compression.GZIP, data)),
    "gzip-zlib-level-9": (Compression.GZIP, lambda data: zlib.compress(data, 9, wbits=31)),
    "gzip-two-members": (Compression.GZIP, _gzip_members),
    "snappy-xerial": (Compression.SNAPPY, lambda data: compress(Compression.SNAPPY, data)),
    "snappy-raw": (Compression.SNAPPY, _raw_snappy),
    "lz4-linked": (Compression.LZ4, lambda data: compress(Compression.LZ4, data)),
    "lz4-independent": (Compression.LZ4, _lz4_independent),
    "lz4-two-frames": (Compression.LZ4, _lz4_two_frames),
    "zstd": (Compression.ZSTD, lambda data: compress(Compression.ZSTD, data)),
    "zstd-streamed": (Compression.ZSTD, _zstd_streamed),
    "zstd-two-frames": (Compression.ZSTD, _zstd_two_frames),
}
SAMPLES = {
    "text": TEXT,
    "zeros": bytes(300_000),  # RLE blocks in zstd
    "incompressible": bytes(range(256)) * 4,  # stored blocks in lz4, raw blocks in zstd
    "one-byte": b"x",
}


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("encoder", ENCODERS)
def test_round_trip_and_exact_bound(encoder: str, sample: str) -> None:
    codec, encode = ENCODERS[encoder]
    data = SAMPLES[sample]
    payload = encode(data)
    assert decompress(codec, payload, max_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES) == data
    assert decompress(codec, memoryview(payload), max_bytes=len(data)) == data
    with pytest.raises(DecompressionError) as excinfo:
        decompress(codec, payload, max_bytes=len(data) - 1)
    assert excinfo.value.too_large
    assert f"the limit is {len(data) - 1}" in str(excinfo.value)


@pytest.mark.parametrize(
    ("codec", "payload"),
    [
        (Compression.LZ4, LZ4_CONTENT_SIZE),
        (Compression.LZ4, LZ4_BLOCK_CHECKSUM),
        (Compression.ZSTD, ZSTD_CHECKSUM),
    ],
)
def test_frames_written_by_the_reference_tools(codec: Compression, payload: bytes) -> None:
    assert decompress(codec, payload, max_bytes=len(SMALL)) == SMALL
    with pytest.raises(DecompressionError) as excinfo:
        decompress(codec, payload, max_bytes=len(SMALL) - 1)
    assert excinfo.value.too_large


@pytest.mark.parametrize(
    ("codec", "payload", "declared"),
    [(Compression.LZ4, LZ4_CONTENT_SIZE, 6), (Compression.ZSTD, ZSTD_CHECKSUM, 5)],
)
def test_a_lying_content_size_is_corrupt(codec: Compression, payload: bytes, declared: int) -> None:
    # Declaring one byte more than the frame holds: the decoder refuses the mismatch.
    # (zstd's 2-byte field stores size - 256; lz4's header checksum then also fails.)
    lying = bytearray(payload)
    lying[declared] += 1
    with pytest.raises(DecompressionError) as excinfo:
        decompress(codec, bytes(lying), max_bytes=MiB)
    assert not excinfo.value.too_large


def test_a_bound_above_the_limit_still_decodes_what_fits() -> None:
    # Streamed zstd declares no size; its three 128 KiB blocks bound it at 384 KiB, more
    # than the limit, so the decoder runs into a buffer of exactly the limit.
    data = TEXT[: 300 * 1024]
    payload = _zstd_streamed(data)
    assert decompress(Compression.ZSTD, payload, max_bytes=len(data) + 1) == data
    with pytest.raises(DecompressionError) as excinfo:
        decompress(Compression.ZSTD, payload, max_bytes=len(data) - 1)
    assert excinfo.value.too_large


@pytest.mark.parametrize(
    "encoder", ["gzip", "snappy-raw", "lz4-linked", "lz4-independent", "zstd", "zstd-streamed"]
)
def test_every_truncation_is_refused(encoder: str) -> None:
    codec, encode = ENCODERS[encoder]
    payload = encode(SAMPLES["text"][:3000])
    for cut in range(len(payload)):
        with pytest.raises(DecompressionError) as excinfo:
            decompress(codec, payload[:cut], max_bytes=MiB)
        assert not excinfo.value.too_large, cut


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "garbage",
    [
        b"",
        b"\x00",
        b"garbage!" * 4,
        b"\x1f\x8b" + b"garbage!" * 4,
        b"\x82SNAPPY\x00" + b"garbage!" * 4,
        b"\x04\x22\x4d\x18" + b"garbage!" * 4,
        b"\x28\xb5\x2f\xfd" + b"garbage!" * 4,
    ],
)
def test_garbage_is_undecodable(codec: Compression, garbage: bytes) -> None:
    if codec == Compression.SNAPPY and garbage == b"\x00":
        assert decompress(codec, garbage, max_bytes=MiB) == b""  # a raw block of nothing
        return
    with pytest.raises(DecompressionError) as excinfo:
        decompress(codec, garbage, max_bytes=MiB)
    assert not excinfo.value.too_large


def test_snappy_preambles_are_checked_before_allocating() -> None:
    four_gib = b"\xff\xff\xff\xff\x0f" + b"\x00" * 20
    with pytest.raises(DecompressionError, match="4294967295 bytes; the limit is 1048576"):
        decompress(Compression.SNAPPY, four_gib, max_bytes=MiB)
    xerial = compress(Compression.SNAPPY, TEXT)  # chunks of 32 KiB
    with pytest.raises(DecompressionError, match="at least 65536 bytes; the limit is 40000"):
        decompress(Compression.SNAPPY, xerial, max_bytes=40_000)


def test_unknown_codec() -> None:
    with pytest.raises(ValueError, match="unknown codec 5"):
        decompress(5, b"abc", max_bytes=MiB)


@settings(max_examples=400, deadline=None)
@given(codec=st.sampled_from(CODECS), payload=st.binary(max_size=400))
def test_arbitrary_bytes_only_raise_decompression_error(codec: Compression, payload: bytes) -> None:
    prefix = {
        Compression.GZIP: b"\x1f\x8b\x08\x00",
        Compression.SNAPPY: b"\x82SNAPPY\x00",
        Compression.LZ4: b"\x04\x22\x4d\x18",
        Compression.ZSTD: b"\x28\xb5\x2f\xfd",
    }[codec]
    for candidate in (payload, prefix + payload):
        try:
            out = decompress(codec, candidate, max_bytes=4096)
        except DecompressionError:
            continue
        assert len(out) <= 4096


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    encoder=st.sampled_from(sorted(ENCODERS)),
    flips=st.lists(
        st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 7)),
        min_size=1,
        max_size=3,
    ),
    max_bytes=st.sampled_from([100, 3000, 4000, MiB]),
)
def test_damaged_streams_only_raise_decompression_error(
    encoder: str, flips: list[tuple[int, int]], max_bytes: int
) -> None:
    codec, encode = ENCODERS[encoder]
    damaged = bytearray(encode(TEXT[:3000]))
    for where, bit in flips:
        damaged[where % len(damaged)] ^= 1 << bit
    try:
        out = decompress(codec, bytes(damaged), max_bytes=max_bytes)
    except DecompressionError:
        return
    assert len(out) <= max_bytes


# --------------------------------------------------------------------- decompression bombs

BOMB_BYTES = 512 * MiB
BOMB_LIMIT = 16 * MiB
PATTERN = bytes(range(256)) * 4096  # 1 MiB that zstd cannot write as RLE blocks


def _gzip_bomb(size: int) -> bytes:
    """One valid gzip member of ``size`` zero bytes, built without deflating them all."""
    zeros = bytes(MiB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    piece = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)  # state reset
    end = deflater.flush(zlib.Z_FINISH)[:-8]
    crc = 0
    for _ in range(size // MiB):
        crc = zlib.crc32(zeros, crc)
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return head + piece * (size // MiB - 1) + end + trailer


def _lz4_bomb(size: int) -> bytes:
    """A valid lz4 frame of independent, checksummed 64 KiB blocks of zeros."""
    frame = _lz4_independent(bytes(128 * 1024))
    (length,) = struct.unpack_from("<I", frame, 7)
    header, block = frame[:7], frame[7 : 7 + 4 + length + 4]
    assert frame == header + block * 2 + b"\x00" * 4
    return header + block * (size // (64 * 1024)) + b"\x00" * 4


def _zstd_streamed_bomb(size: int) -> bytes:
    """No content size and compressed (not RLE) blocks: only the buffer stops it."""
    encoder = cramjam.zstd.Compressor()
    for _ in range(size // len(PATTERN)):
        encoder.compress(PATTERN)
    return bytes(encoder.finish())


def _xerial_bomb(size: int) -> bytes:
    chunk = _raw_snappy(bytes(4 * MiB))
    header = struct.pack(">8sii", b"\x82SNAPPY\x00", 1, 1)
    return header + (struct.pack(">i", len(chunk)) + chunk) * (size // (4 * MiB))


BOMBS: dict[str, tuple[Compression, Callable[[int], bytes]]] = {
    "gzip": (Compression.GZIP, _gzip_bomb),
    "snappy-raw": (Compression.SNAPPY, lambda size: _raw_snappy(bytes(size))),
    "snappy-xerial": (Compression.SNAPPY, _xerial_bomb),
    "lz4": (Compression.LZ4, _lz4_bomb),
    "zstd-content-size": (Compression.ZSTD, lambda size: compress(Compression.ZSTD, bytes(size))),
    "zstd-streamed": (Compression.ZSTD, _zstd_streamed_bomb),
}

_REFUSE_IN_CHILD = """
import gc, json, sys
from strom.protocol.records import RecordsError, validate_batches

def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

data = open(sys.argv[1], "rb").read()
gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset the peak (VmHWM) to the current RSS
except OSError as exc:
    print(json.dumps({"skip": f"cannot reset the peak RSS: {exc}"}))
    sys.exit()
rss_kib = kib("VmRSS:")
try:
    validate_batches(data, max_batch_bytes=1 << 30, max_decompressed_bytes=int(sys.argv[2]))
    outcome = "accepted"
except RecordsError as exc:
    outcome = exc.error_code.name
print(json.dumps({"outcome": outcome, "growth_kib": kib("VmHWM:") - rss_kib}))
"""


def _batch(payload: bytes, codec: Compression) -> bytes:
    header = bytearray(encode_batch([(None, b"v", [])], base_timestamp_ms=1)[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - 12 + len(payload))
    struct.pack_into(">h", header, 21, codec)
    batch = header + payload
    struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
    return bytes(batch)


@pytest.mark.parametrize("bomb", BOMBS)
def test_bombs_are_valid_streams(bomb: str) -> None:
    codec, build = BOMBS[bomb]
    size = 8 * MiB
    expected = PATTERN * 8 if bomb == "zstd-streamed" else bytes(size)
    assert decompress(codec, build(size), max_bytes=size) == expected


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures RSS in /proc")
@pytest.mark.parametrize("bomb", BOMBS)
def test_a_bomb_is_refused_within_bounded_memory(bomb: str, tmp_path: Path) -> None:
    codec, build = BOMBS[bomb]
    path = tmp_path / "batch"
    path.write_bytes(_batch(build(BOMB_BYTES), codec))
    child = subprocess.run(
        [sys.executable, "-c", _REFUSE_IN_CHILD, str(path), str(BOMB_LIMIT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(child.stdout)
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result["outcome"] == ErrorCode.invalid_record.name
    # Decompressing it would take 512 MiB; the buffer is the 16 MiB limit, and zstd's
    # decoder keeps a window of its own.
    assert result["growth_kib"] * 1024 < 2 * BOMB_LIMIT + 8 * MiB, result
