from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A fresh single-node strom on a free port, stopped after the test."""
    process = BrokerProcess(tmp_path / "data")
    process.start()
    try:
        yield process
    finally:
        process.kill()
