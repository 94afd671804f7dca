"""The shell's wall clock; cores never read it, they are handed `now_ms`."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
