"""The replication core under a seeded fault-injecting simulation (replication_sim.py).

.venv/bin/pytest tests/sim/test_replication_sim.py                              # seeds 0..999
STROM_REPLICATION_SEEDS=20000 .venv/bin/pytest tests/sim/test_replication_sim.py  # more seeds
STROM_REPLICATION_SEED=123 .venv/bin/pytest tests/sim/test_replication_sim.py     # replay one
"""

from __future__ import annotations

import os

import pytest
from replication_sim import BROKEN, InvariantViolation, run_seed

_ONE = os.environ.get("STROM_REPLICATION_SEED")
SEEDS = [int(_ONE)] if _ONE else list(range(int(os.environ.get("STROM_REPLICATION_SEEDS", "1000"))))
BROKEN_SEEDS = 300
"""A deliberately broken core must fail within this many seeds."""


@pytest.mark.parametrize("seed", SEEDS)
def test_replication_keeps_acknowledged_writes_and_recovers(seed: int) -> None:
    replay = (
        f"replay: STROM_REPLICATION_SEED={seed} .venv/bin/pytest tests/sim/test_replication_sim.py"
    )
    try:
        run_seed(seed)
    except InvariantViolation as error:
        pytest.fail(f"{error}\n\n{replay}", pytrace=False)
    except Exception as error:
        error.add_note(replay)
        raise


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_the_simulation_catches_a_broken_core(broken: str) -> None:
    """Each variant puts back a bug (a high watermark over a lagging follower, or the
    causes of the anomalies found under network partitions: an empty leader epoch kept
    at a follower's log end, fenced replicas proposed for the ISR)."""
    for seed in range(BROKEN_SEEDS):
        try:
            run_seed(seed, broken)
        except InvariantViolation:
            return
    pytest.fail(f"{broken}: no seed of {BROKEN_SEEDS} found the bug")
