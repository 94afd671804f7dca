"""The Spark source and sink against a secured broker: a SASL_SSL listener offering
SCRAM-SHA-512, the settings passed as `kafka.*` options. The exactly-once sink writes
(its producers through librdkafka, its transaction calls through strom's own client),
and both readers read back every row once; a wrong password fails the query with the
broker's reason.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from broker import BrokerProcess, free_port
from client_helpers import add_scram_user
from spark_helpers import create_topic, unique_topic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from strom.spark.kafka import REQUEST_TIMEOUT_S
from tls_material import TlsMaterial, make_tls_material

ROWS = 200


class SecuredBroker:
    def __init__(self, broker: BrokerProcess, port: int, material: TlsMaterial) -> None:
        self.broker = broker
        self.port = port
        self.material = material

    def options(self, password: str = "spark-secret") -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": f"localhost:{self.port}",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.ca.location": str(self.material.ca_cert_path),
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.username": "spark",
            "kafka.sasl.password": password,
        }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    material = make_tls_material(tmp_path_factory.mktemp("spark-tls"))
    port = free_port()
    settings = [
        "auto.create.topics.enable=false",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={material.server.keystore_pem_path}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
    ]
    broker = BrokerProcess(
        tmp_path_factory.mktemp("spark-secured") / "data",
        more_listeners=[f"SASL_SSL://localhost:{port}"],
        extra=[part for setting in settings for part in ("--set", setting)],
    )
    broker.start()
    try:
        add_scram_user(broker.bootstrap, "spark", "spark-secret")
        yield SecuredBroker(broker, port, material)
    finally:
        broker.kill()


def _with(frame: Any, options: dict[str, str]) -> Any:
    for name, value in options.items():
        frame = frame.option(name, value)
    return frame


def test_the_exactly_once_sink_and_both_readers_work_over_sasl_ssl(
    spark: Any, secured: SecuredBroker
) -> None:
    topic = create_topic(secured.broker.bootstrap, unique_topic("secured"), 2)
    rows = spark.range(0, ROWS, 1, 2).selectExpr("format_string('row-%04d', id) AS value")
    writer = _with(rows.write.format("strom"), secured.options())
    writer = writer.option("topic", topic).option("exactlyOnce", "true")
    writer.option("transactionalIdPrefix", unique_topic("secured-job")).mode("append").save()
    expected = sorted(f"row-{i:04d}" for i in range(ROWS))
    for reader in ("batches", "consumer"):
        read = _with(spark.read.format("strom"), secured.options())
        read = read.option("subscribe", topic).option("reader", reader)
        read = read.option("kafka.isolation.level", "read_committed")
        values = sorted(row.value.decode() for row in read.load().select("value").collect())
        assert values == expected, reader


def test_a_wrong_password_fails_the_read_with_the_reason(
    spark: Any, secured: SecuredBroker
) -> None:
    topic = create_topic(secured.broker.bootstrap, unique_topic("secured-refused"), 1)
    read = _with(spark.read.format("strom"), secured.options(password="not-it"))
    read = read.option("subscribe", topic).option("reader", "batches")
    started = time.monotonic()
    with pytest.raises(Exception, match=r"after 1 attempt\(s\): .*Authentication failed"):
        read.load().collect()
    # Not retried, and not waiting out librdkafka's metadata timeout (30 s) either.
    assert time.monotonic() - started < REQUEST_TIMEOUT_S
