"""The Raft core under a seeded fault-injecting simulation (raft_sim.py), one test per seed.

.venv/bin/pytest tests/sim/test_raft_sim.py                        # seeds 0..999
STROM_RAFT_SEEDS=20000 .venv/bin/pytest tests/sim/test_raft_sim.py  # more seeds
STROM_RAFT_SEED=123 .venv/bin/pytest tests/sim/test_raft_sim.py     # replay one seed
"""

from __future__ import annotations

import os

import pytest
from raft_sim import InvariantViolation, run_seed

_ONE = os.environ.get("STROM_RAFT_SEED")
SEEDS = [int(_ONE)] if _ONE else list(range(int(os.environ.get("STROM_RAFT_SEEDS", "1000"))))


@pytest.mark.parametrize("seed", SEEDS)
def test_raft_keeps_its_safety_properties_and_converges(seed: int) -> None:
    replay = f"replay: STROM_RAFT_SEED={seed} .venv/bin/pytest tests/sim/test_raft_sim.py"
    try:
        run_seed(seed)
    except InvariantViolation as error:
        pytest.fail(f"{error}\n\n{replay}", pytrace=False)
    except Exception as error:
        error.add_note(replay)
        raise
