"""What every test run shares: the Python processes the tests start load no Hypothesis
(tests/child_site/sitecustomize.py says why), and Hypothesis has no deadline.

Hypothesis's default deadline (200 ms per example) is a timed assertion: on a loaded
two-core machine a correct test fails it now and then. Speed is measured in bench/,
never asserted in tests; a test that must not hang bounds what it waits for instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("strom", deadline=None)
settings.load_profile("strom")

CHILD_SITE = Path(__file__).parent / "child_site"


@pytest.fixture(scope="session", autouse=True)
def children_without_hypothesis() -> Iterator[None]:
    """Put child_site first on the PYTHONPATH of the processes started from now on. A
    fixture, not an import-time change, so that pytest-xdist's workers, which run the
    Hypothesis tests, are started before it."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CHILD_SITE), before]))
    yield
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before
