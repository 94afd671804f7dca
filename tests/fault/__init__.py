"""A fault-injection harness for a real strom cluster, and the checker of its histories.

A run (runner.py) starts N `strom serve` nodes, writes with idempotent acks=all producers
and reads with consumers while a seeded schedule (schedule.py) kills and pauses nodes or
cuts the network between them (each node in a network namespace: network.py,
topology.py), then heals the cluster and reads every partition back. Everything that
happened is a History (history.py); check() (checker.py) is a pure function of it that
lists every lost acknowledged write, lost read, duplicate, backwards read and reordered write, and
(recovery.py) every partition that takes no write soon after a heal of the network.

    .venv/bin/pytest tests/fault                          # the acceptance tests
    STROM_FAULT_REPLAY=path .venv/bin/pytest tests/fault -k <name>   # replay a failure
    .venv/bin/python -m tests.fault.soak --minutes 10 --seed 7       # the release soak
    .venv/bin/python -m tests.fault.soak --network --minutes 10      # with partitions

docs/fault-testing.md says how to read a failure.
"""

import sys
from pathlib import Path

# The cluster harness of the integration tests (tests/integration/cluster.py), imported
# as `cluster` as the integration tests do.
_INTEGRATION = str(Path(__file__).parents[1] / "integration")
if _INTEGRATION not in sys.path:
    sys.path.insert(0, _INTEGRATION)
