"""The Spark source and sink against OAUTHBEARER listeners, the login given as librdkafka's
`kafka.*` options: librdkafka (the driver's admin client, the producers, the consumer
reader) and strom's own client (the batch reader, the exactly-once sink's transaction
calls) both log in, with unsecured tokens and with client credentials at a token
endpoint (tests/integration/oauth_helpers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from oauth_helpers import KeyServer, OAuthBroker, TokenServer, running_token_server
from spark_helpers import create_topic, unique_topic

from tls_material import TlsMaterial

ROWS = 100
SECRET = "spark-secret-42"


@pytest.fixture(scope="module")
def idp(tls: TlsMaterial, keys: KeyServer) -> Iterator[TokenServer]:
    with running_token_server(tls, keys, {"spark-job": SECRET}) as server:
        yield server


def _with(frame: Any, options: dict[str, str]) -> Any:
    for name, value in options.items():
        frame = frame.option(name, value)
    return frame


def _read(spark: Any, options: dict[str, str], topic: str, reader: str) -> list[str]:
    read = _with(spark.read.format("strom"), options).option("subscribe", topic)
    read = read.option("reader", reader).option("kafka.isolation.level", "read_committed")
    return sorted(row.value.decode() for row in read.load().select("value").collect())


def test_unsecured_tokens_for_the_exactly_once_sink_and_both_readers(
    spark: Any, oauth_broker: OAuthBroker
) -> None:
    options = {
        "kafka.bootstrap.servers": f"localhost:{oauth_broker.unsecured_port}",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.enable.sasl.oauthbearer.unsecure.jwt": "true",
        "kafka.sasl.oauthbearer.config": "principal=spark scope=kafka",
    }
    topic = create_topic(oauth_broker.process.bootstrap, unique_topic("oauth-unsecured"), 2)
    rows = spark.range(0, ROWS, 1, 2).selectExpr("format_string('row-%04d', id) AS value")
    writer = _with(rows.write.format("strom"), options).option("topic", topic)
    writer = writer.option("exactlyOnce", "true")
    writer.option("transactionalIdPrefix", unique_topic("oauth-job")).mode("append").save()
    expected = sorted(f"row-{i:04d}" for i in range(ROWS))
    for reader in ("batches", "consumer"):
        assert _read(spark, options, topic, reader) == expected, reader
    log = oauth_broker.process.read_log()
    assert "authenticated with OAUTHBEARER on UNSECURED as User:spark" in log


def test_client_credentials_for_the_batch_reader(
    spark: Any, oauth_broker: OAuthBroker, idp: TokenServer, tls: TlsMaterial
) -> None:
    options = {
        "kafka.bootstrap.servers": f"localhost:{oauth_broker.signed_port}",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.method": "oidc",
        "kafka.sasl.oauthbearer.client.id": "spark-job",
        "kafka.sasl.oauthbearer.client.secret": SECRET,
        "kafka.sasl.oauthbearer.token.endpoint.url": idp.url,
        "kafka.https.ca.location": str(tls.ca_cert_path),
    }
    topic = create_topic(oauth_broker.process.bootstrap, unique_topic("oauth-oidc"), 2)
    rows = spark.range(0, ROWS, 1, 2).selectExpr("format_string('row-%04d', id) AS value")
    _with(rows.write.format("strom"), options).option("topic", topic).mode("append").save()
    assert _read(spark, options, topic, "batches") == sorted(f"row-{i:04d}" for i in range(ROWS))
    log = oauth_broker.process.read_log()
    assert "authenticated with OAUTHBEARER on SIGNED as User:spark-job" in log
    assert {grant.status for grant in idp.grants} == {200}
