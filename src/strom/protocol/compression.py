"""Record batch codecs, with the decompressed size bounded before the memory is spent.

A produced batch is small, but what it decompresses to is the client's word: a 30 KB
zstd frame can expand to 1 GB. Every decompression here is given ``max_bytes`` and its
output never grows past that; the check comes before or while decompressing, not after:

- gzip: ``zlib`` with ``max_length``, in 1 MiB steps into one growing buffer, member
  after member (concatenated members are allowed, as Java's ``GZIPInputStream`` reads).
- snappy, one raw block (librdkafka) or xerial chunks (the Java client): each block's
  length preamble is read first and the output is allocated at exactly that size.
- lz4 frames and zstd frames: cramjam cannot stop a decoder at a size (its
  ``output_len`` is only a capacity hint), but its ``decompress_into`` streams into a
  fixed buffer and fails when the buffer is full. The buffer's size comes from walking
  the frame and block headers by hand: every lz4 block decompresses to at most the
  frame's block maximum and every compressed zstd block to at most 128 KiB, stored,
  raw and RLE blocks and declared content sizes are exact. Real encoders fill their
  blocks, so the bound is close; when it exceeds ``max_bytes`` the buffer is
  ``max_bytes`` long, and a declared size above ``max_bytes`` is refused unread.

Besides the output, a decoder holds its own window: 32 KiB for gzip, one block (at most
4 MiB) for lz4, but for zstd up to the frame's window size, which libzstd caps at
128 MiB. A zstd bomb with a large window can therefore peak near twice ``max_bytes``.

The frame and block header walks are written by hand because no codec package exposes
them; decompression itself is cramjam's and zlib's. Nothing here does I/O.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from types import ModuleType
from typing import TypeAlias

import cramjam

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "Compression",
    "DecompressionError",
    "compress",
    "decompress",
]

DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
"""Most bytes one batch's records may decompress to."""

Buffer: TypeAlias = bytes | bytearray | memoryview

_GZIP_STEP = 1024 * 1024
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_BLOCK = struct.Struct(">i")
_XERIAL_BLOCK_SIZE = 32 * 1024

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SKIPPABLE_MASK = 0xFFFFFFF0
_SKIPPABLE_MAGIC = 0x184D2A50  # lz4 and zstd share the skippable frame format
_LZ4_MAGIC = 0x184D2204
_LZ4_BLOCK_MAX = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_LZ4_UNCOMPRESSED_BIT = 0x80000000
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)
# Rust's io::ErrorKind::WriteZero, which cramjam reports when decompress_into fills the
# buffer. Only used to word the error; the bound does not depend on it.
_BUFFER_FULL = "failed to write whole buffer"


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class DecompressionError(ValueError):
    """Undecodable data (``too_large`` False) or data expanding past the bound (True)."""

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def _too_large(amount: str, max_bytes: int) -> DecompressionError:
    """``amount`` words the size: "12345", "at least 12345", "more than 100"."""
    return DecompressionError(
        f"records decompress to {amount} bytes; the limit is {max_bytes}", too_large=True
    )


def decompress(codec: int, data: Buffer, *, max_bytes: int) -> bytes | bytearray:
    """Decompress a batch's records section into at most ``max_bytes`` bytes.

    Raises DecompressionError, with ``too_large`` set when the output would exceed
    ``max_bytes``; ValueError for an unknown codec.
    """
    try:
        if codec == Compression.GZIP:
            return _gunzip(data, max_bytes)
        if codec == Compression.SNAPPY:
            return _unsnappy(data, max_bytes)
        if codec == Compression.LZ4:
            low, high = _lz4_bounds(data)
            return _decompress_into(cramjam.lz4, data, low, high, max_bytes)
        if codec == Compression.ZSTD:
            low, high = _zstd_bounds(data)
            return _decompress_into(cramjam.zstd, data, low, high, max_bytes)
    except DecompressionError:
        raise
    except (zlib.error, cramjam.DecompressionError, struct.error, IndexError) as exc:
        raise DecompressionError(f"cannot decompress records (codec {codec}): {exc}") from exc
    raise ValueError(f"unknown codec {codec}")


def _gunzip(data: Buffer, max_bytes: int) -> bytearray:
    # Inflate in steps into one growing buffer: zlib joins the pieces of a single large
    # call into a copy, which would double the peak.
    if not len(data):
        raise DecompressionError("empty gzip data")
    out = bytearray()
    rest: Buffer = data
    while rest:  # one gzip member per iteration
        inflater = zlib.decompressobj(wbits=31)
        while not inflater.eof:
            # max_length 0 would mean "no limit"; len(out) <= max_bytes keeps it >= 1.
            step = min(max_bytes - len(out) + 1, _GZIP_STEP)
            part = inflater.decompress(rest, step)
            if not part and not inflater.eof:
                raise DecompressionError("gzip data ends inside a member")
            out += part
            if len(out) > max_bytes:
                raise _too_large(f"more than {max_bytes}", max_bytes)
            rest = inflater.unconsumed_tail
        rest = inflater.unused_data
    return out


def _unsnappy(data: Buffer, max_bytes: int) -> bytearray:
    if not len(data):
        raise DecompressionError("empty snappy data")
    if bytes(data[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        size = cramjam.snappy.decompress_raw_len(data)
        if size > max_bytes:
            raise _too_large(str(size), max_bytes)
        out = bytearray(size)
        cramjam.snappy.decompress_raw_into(data, out)
        return out
    # Xerial framing: a 16-byte header, then (i32 length, raw snappy block) chunks.
    end = len(data)
    if end < _XERIAL_HEADER.size:
        raise DecompressionError("truncated xerial snappy header")
    chunks: list[tuple[int, int, int]] = []  # (start, end, decompressed size)
    total = 0
    pos = _XERIAL_HEADER.size
    while pos < end:
        if pos + _XERIAL_BLOCK.size > end:
            raise DecompressionError("truncated xerial snappy block length")
        (length,) = _XERIAL_BLOCK.unpack_from(data, pos)
        pos += _XERIAL_BLOCK.size
        if length < 0 or pos + length > end:
            raise DecompressionError("truncated xerial snappy block")
        size = cramjam.snappy.decompress_raw_len(data[pos : pos + length])
        total += size
        if total > max_bytes:
            raise _too_large(f"at least {total}", max_bytes)
        chunks.append((pos, pos + length, size))
        pos += length
    out = bytearray(total)
    with memoryview(out) as view:
        written = 0
        for start, stop, size in chunks:
            cramjam.snappy.decompress_raw_into(data[start:stop], view[written : written + size])
            written += size
    return out


def _decompress_into(
    codec: ModuleType, data: Buffer, low: int, high: int, max_bytes: int
) -> bytearray:
    """Stream ``data`` into a buffer of ``min(high, max_bytes)`` bytes.

    ``low`` and ``high`` bound the output size as the frame headers declare it.
    """
    if low > max_bytes:
        raise _too_large(f"at least {low}", max_bytes)
    if low > high:
        raise DecompressionError(f"frame headers declare {low} bytes but blocks hold {high}")
    size = min(high, max_bytes)
    out = bytearray(size)
    try:
        written: int = codec.decompress_into(data, out)
    except cramjam.DecompressionError as exc:
        if high > max_bytes and _BUFFER_FULL in str(exc):
            raise _too_large(f"more than {max_bytes}", max_bytes) from exc
        raise
    del out[written:]
    return out


def _skippable_frame_end(data: Buffer, pos: int) -> int:
    length: int = _U32.unpack_from(data, pos + 4)[0]
    return pos + 8 + length


def _lz4_bounds(data: Buffer) -> tuple[int, int]:
    """(least, most) bytes the lz4 frames in ``data`` decompress to.

    Frame: magic u32le, FLG, BD, [content size u64le], [dictionary id u32], header
    checksum, blocks (u32le size, high bit = stored uncompressed; [checksum u32]) up to
    a zero size, [content checksum u32]. Frames may follow each other.
    """
    end = len(data)
    if end == 0:
        raise DecompressionError("empty lz4 data")
    low = high = 0
    pos = 0
    while pos < end:
        (magic,) = _U32.unpack_from(data, pos)
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            pos = _skippable_frame_end(data, pos)
            continue
        if magic != _LZ4_MAGIC:
            raise DecompressionError(f"not an lz4 frame (magic {magic:#010x})")
        flags, descriptor = data[pos + 4], data[pos + 5]
        block_max = _LZ4_BLOCK_MAX.get((descriptor >> 4) & 0x07)
        if flags >> 6 != 1 or block_max is None:
            raise DecompressionError("unsupported lz4 frame version or block size")
        pos += 6
        content_size = None
        if flags & 0x08:
            # liblz4 reads a declared size of 0 as "unknown" and does not check it.
            content_size = _U64.unpack_from(data, pos)[0] or None
            pos += 8
        if flags & 0x01:
            pos += 4  # dictionary id
        pos += 1  # header checksum, checked by the decoder
        block_checksum = 4 if flags & 0x10 else 0
        frame_low = frame_high = 0
        while True:
            (word,) = _U32.unpack_from(data, pos)
            pos += 4
            if word == 0:
                break
            size = word & ~_LZ4_UNCOMPRESSED_BIT
            if size > block_max:
                raise DecompressionError(f"lz4 block of {size} bytes exceeds {block_max}")
            if word & _LZ4_UNCOMPRESSED_BIT:
                frame_low += size
                frame_high += size
            else:
                frame_high += block_max
            pos += size + block_checksum
        if flags & 0x04:
            pos += 4  # content checksum
        if content_size is not None:
            frame_low = max(frame_low, content_size)
            frame_high = min(frame_high, content_size)
        low += frame_low
        high += frame_high
    if pos != end:
        raise DecompressionError("truncated lz4 frame")
    return low, high


def _zstd_bounds(data: Buffer) -> tuple[int, int]:
    """(least, most) bytes the zstd frames in ``data`` decompress to.

    Frame: magic u32le, descriptor (content size flag 2 bits, single segment, unused,
    reserved, checksum, dictionary id flag 2 bits), [window], [dictionary id], [content
    size], blocks (3-byte u24le header: last bit, type 2 bits, size 21 bits), [checksum
    u32]. Raw blocks hold ``size`` bytes, RLE blocks one byte repeated ``size`` times,
    compressed blocks ``size`` bytes expanding to at most 128 KiB.
    """
    end = len(data)
    if end == 0:
        raise DecompressionError("empty zstd data")
    low = high = 0
    pos = 0
    while pos < end:
        (magic,) = _U32.unpack_from(data, pos)
        if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
            pos = _skippable_frame_end(data, pos)
            continue
        if magic != _ZSTD_MAGIC:
            raise DecompressionError(f"not a zstd frame (magic {magic:#010x})")
        descriptor = data[pos + 4]
        pos += 5
        single_segment = descriptor & 0x20
        if not single_segment:
            pos += 1  # window descriptor
        pos += _ZSTD_DICT_ID_SIZES[descriptor & 0x03]
        content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        content_size = None
        if content_size_bytes:
            chunk = bytes(data[pos : pos + content_size_bytes])
            if len(chunk) < content_size_bytes:
                raise DecompressionError("truncated zstd frame header")
            content_size = int.from_bytes(chunk, "little") + (256 if content_size_bytes == 2 else 0)
            pos += content_size_bytes
        frame_low = frame_high = 0
        while True:
            block_header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            size = block_header >> 3
            kind = (block_header >> 1) & 0x03
            if kind == 0:  # raw
                frame_low += size
                frame_high += size
                pos += 3 + size
            elif kind == 1:  # RLE
                frame_low += size
                frame_high += size
                pos += 4
            elif kind == 2:  # compressed
                frame_high += _ZSTD_BLOCK_MAX
                pos += 3 + size
            else:
                raise DecompressionError("reserved zstd block type")
            if block_header & 1:
                break
        if descriptor & 0x04:
            pos += 4  # content checksum
        if content_size is not None:
            frame_low = max(frame_low, content_size)
            frame_high = min(frame_high, content_size)
        low += frame_low
        high += frame_high
    if pos != end:
        raise DecompressionError("truncated zstd frame")
    return low, high


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        # Xerial framing, as the Java client writes: every Kafka client can read it.
        parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
        for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK_SIZE]))
            parts.append(_XERIAL_BLOCK.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")
