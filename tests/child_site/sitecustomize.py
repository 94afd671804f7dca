"""Loaded by every Python process the slower tests start (their conftest puts this
directory on PYTHONPATH): brokers, strom commands, Spark's Python workers.

Those processes run without Hypothesis, as strom does where it is installed for use:
Hypothesis is a test dependency, and kio registers its strategies when it can import it,
which costs each process about 0.2 s of start-up (a fifth of a broker's). The tests'
own process, which uses Hypothesis, is not affected.
"""

import sys

sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
