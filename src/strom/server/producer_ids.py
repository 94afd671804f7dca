"""Producer ids for idempotent producers, unique for the life of the data directory.

Ids are handed out from blocks; the end of the current block is fsynced to
`producer-ids` before any id of it is used, so a restart never hands one out twice.
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000
FILE_NAME = "producer-ids"


class ProducerIdAllocator:
    """next_id() -> id; persisting a new block end whenever a block is used up."""

    def __init__(self, log_dir: Path) -> None:
        self._path = log_dir / FILE_NAME
        try:
            self._next = int(self._path.read_text().strip() or 0)
        except FileNotFoundError:
            self._next = 0
        except ValueError:
            raise RuntimeError(f"{self._path} is damaged; it should hold one number") from None
        self._block_end = self._next

    def next_id(self) -> int:
        if self._next >= self._block_end:
            self._block_end = self._next + BLOCK_SIZE
            tmp = self._path.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(f"{self._block_end}\n")
                f.flush()
                os.fsync(f.fileno())
            tmp.replace(self._path)
        producer_id = self._next
        self._next += 1
        return producer_id
