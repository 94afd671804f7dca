"""One local Spark session and one strom broker, shared by the Spark connector tests.

The broker does not create topics on first use (tests create theirs, and a write to a
missing topic must fail) and checks retention every 200 ms (the data-loss tests).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess
from oauth_helpers import keys, oauth_broker, tls  # noqa: F401 - the OAUTHBEARER tests'

BROKER_SETTINGS = [
    "--set",
    "auto.create.topics.enable=false",
    "--set",
    "log.retention.check.interval.ms=200",
    "--set",
    "log.segment.delete.delay.ms=0",
]


def spark_missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Spark needs Java 17 or newer (no java on PATH, no JAVA_HOME)"
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """SparkSession on local[2], Python workers on this interpreter, the source registered."""
    reason = spark_missing()
    if reason:
        pytest.skip(reason)
    import strom.spark

    session = strom.spark.local_session(
        "strom-tests",
        **{
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        },
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", extra=BROKER_SETTINGS)
    process.start()
    try:
        yield process
    finally:
        process.kill()


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap
