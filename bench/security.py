"""What listener security costs: one broker with a PLAINTEXT, an SSL and a SASL_SSL
listener, the same confluent-kafka producer and consumer on each in turn (on SASL_SSL once
with PLAIN, once with SCRAM-SHA-512 and once with OAUTHBEARER's unsecured JWTs; the order
rotating each round, a fresh topic each time), and the time a fresh client takes to get
its first metadata answer on each (connect, TLS handshake, SASL authentication, Metadata);
prints each figure's median and spread and the ratio to PLAINTEXT.

    .venv/bin/python bench/security.py [--rounds 3] [--records 500000] [--record-bytes 100]
        [--partitions 1] [--durability fsync] [--connects 20]

The certificates (a private CA, EC P-256 keys) are made for the run by
tests/tls_material.py; clients verify the broker's certificate and present none. Broker
CPU is the broker process's user and system time over the phase, per record.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from produce_consume import (
    Broker,
    consume,
    cpu_s,
    create_topic,
    free_port,
    log,
    produce,
    start_strom,
    stop,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tls_material import make_tls_material

Figures = dict[str, float]


def one_run(
    broker: Broker, label: str, bootstrap: str, client: dict[str, Any], args: argparse.Namespace
) -> Figures:
    assert broker.process is not None
    topic = f"tls-bench-{label.replace(' ', '-')}-{secrets.token_hex(4)}"
    create_topic(broker.bootstrap, topic, args.partitions, 1)
    before = cpu_s(broker.process.pid)
    produce_s = produce(bootstrap, topic, args.records, args.record_bytes, client)
    middle = cpu_s(broker.process.pid)
    consume_s = consume(bootstrap, topic, args.partitions, args.records, client=client)
    after = cpu_s(broker.process.pid)
    assert before is not None and middle is not None and after is not None
    figures = {
        "produce rec/s": args.records / produce_s,
        "consume rec/s": args.records / consume_s,
        "broker CPU µs/record, produce": (middle - before) * 1e6 / args.records,
        "broker CPU µs/record, consume": (after - middle) * 1e6 / args.records,
    }
    figures["first metadata answer, ms"] = first_answer_ms(bootstrap, client, args.connects)
    log(f"{label}: " + ", ".join(f"{name} {value:,.1f}" for name, value in figures.items()))
    return figures


def first_answer_ms(bootstrap: str, client: dict[str, Any], tries: int) -> float:
    """Median milliseconds from creating a client to its first metadata answer."""
    times = []
    for _ in range(tries):
        started = time.perf_counter()
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", **client})
        consumer.list_topics(timeout=30)
        times.append((time.perf_counter() - started) * 1000)
        consumer.close()
    return statistics.median(times)


def add_scram_user(bootstrap: str, user: str, password: str) -> None:
    """A SCRAM-SHA-512 user with Kafka's minimum (and the usual) 4096 iterations."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    admin.alter_user_scram_credentials([upsertion])[user].result(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--durability", default="fsync", choices=["fsync", "interval"])
    parser.add_argument("--connects", type=int, default=20)
    args = parser.parse_args()

    material = make_tls_material(Path(tempfile.mkdtemp(prefix="strom-bench-tls-")))
    ssl_port, sasl_port = free_port(), free_port()
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="pw";'
    oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
    broker = start_strom(
        args.durability,
        extra=[
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={material.server.keystore_pem_path}",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512,OAUTHBEARER",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
            f"listener.name.sasl_ssl.oauthbearer.sasl.jaas.config={oauth}",
        ],
        more_listeners=[f"SSL://localhost:{ssl_port}", f"SASL_SSL://localhost:{sasl_port}"],
    )
    tls = {"ssl.ca.location": str(material.ca_cert_path)}
    add_scram_user(broker.bootstrap, "bench", "pw")
    runs: dict[str, tuple[str, dict[str, Any]]] = {
        "PLAINTEXT": (broker.bootstrap, {}),
        "SSL": (f"localhost:{ssl_port}", {"security.protocol": "SSL", **tls}),
        "SASL_SSL": (
            f"localhost:{sasl_port}",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "bench",
                "sasl.password": "pw",
                **tls,
            },
        ),
        "SASL_SSL SCRAM": (
            f"localhost:{sasl_port}",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "bench",
                "sasl.password": "pw",
                **tls,
            },
        ),
        "SASL_SSL OAUTHBEARER": (
            f"localhost:{sasl_port}",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=bench",
                **tls,
            },
        ),
    }
    results: dict[str, list[Figures]] = {name: [] for name in runs}
    try:
        for round_index in range(args.rounds):
            names = list(runs)
            order = names[round_index % len(names) :] + names[: round_index % len(names)]
            for name in order:
                bootstrap, client = runs[name]
                results[name].append(one_run(broker, name, bootstrap, client, args))
    finally:
        stop(broker)

    print(
        f"\n{args.records:,} records of {args.record_bytes} bytes, {args.partitions} "
        f"partition(s), {args.durability} durability, {args.rounds} rounds\n"
    )
    names = list(runs)
    print("| figure | " + " | ".join(f"{n}, median (min-max)" for n in names) + " | ratios |")
    print("|---" * (len(names) + 2) + "|")
    for figure in results["PLAINTEXT"][0]:
        cells = []
        medians = []
        for name in names:
            values = [run[figure] for run in results[name]]
            median = statistics.median(values)
            medians.append(median)
            digits = 0 if median >= 100 else 2
            cells.append(
                f"{median:,.{digits}f} ({min(values):,.{digits}f}-{max(values):,.{digits}f})"
            )
        ratios = ", ".join(
            f"{n} {m / medians[0]:.2f}" for n, m in zip(names[1:], medians[1:], strict=True)
        )
        print(f"| {figure} | " + " | ".join(cells) + f" | {ratios} |")


if __name__ == "__main__":
    main()
