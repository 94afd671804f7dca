"""A client's byte stream cut into Kafka request frames: a pure core, no I/O.

The test network reads client connections frame by frame to answer some requests
itself. Kafka frames are an int32 size and that many bytes; a request is at least
eight (api key, version, correlation id; every request header but ControlledShutdown
v0's then has a client id, so ApiVersions v0 with a null one is ten). A size outside
[8, max_frame_bytes] is not a frame this splitter reads: from then on it is
`passing`, and the bytes go to the broker as they come (which closes the connection on
them, as it should).

    reading frames -> feed(...) -> ... -> (a size it will not read) -> passing
"""

from __future__ import annotations

import struct
from typing import Final

MIN_REQUEST_BYTES: Final = 8
_SIZE = struct.Struct(">i")


class FrameSplitter:
    def __init__(self, max_frame_bytes: int) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self.passing = False

    def feed(self, data: bytes) -> list[bytes]:
        """Every frame (size prefix included) that `data` completes, in order. Once
        `passing`, nothing: `take_rest()` has the bytes to pass on."""
        self._buffer += data
        frames = []
        while not self.passing and len(self._buffer) >= _SIZE.size:
            size = _SIZE.unpack_from(self._buffer)[0]
            if not MIN_REQUEST_BYTES <= size <= self._max_frame_bytes:
                self.passing = True
                break
            end = _SIZE.size + size
            if len(self._buffer) < end:
                break
            frames.append(bytes(self._buffer[:end]))
            del self._buffer[:end]
        return frames

    def take_rest(self) -> bytes:
        """The bytes read but not returned as a frame (emptied)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest
