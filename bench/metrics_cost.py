"""What the metrics cost: produce and consume throughput of strom with the metrics endpoint
off and on (scraped every second, as Prometheus would), alternating in one run.

    .venv/bin/python bench/metrics_cost.py [--records 500000] [--record-bytes 100]
        [--partitions 1] [--rounds 3] [--durability fsync]

Each round starts a fresh broker without `metrics.listener`, then one with it and a
scraper thread fetching /metrics every second, and runs the same produce (acks=all) and
consume (librdkafka's default fetch settings) of produce_consume.py against each. It
prints every figure, the medians and the ratio on/off (1.00 = no cost).
"""

from __future__ import annotations

import argparse
import secrets
import shlex
import statistics
import sys
import threading
import time
import urllib.request

from produce_consume import (
    DURABILITY_SETTINGS,
    consume,
    create_topic,
    free_port,
    log,
    produce,
    start_strom,
    stop,
)


class Scraper(threading.Thread):
    """GET /metrics every second until stopped; counts scrapes and their bytes."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.halt = threading.Event()
        self.scrapes = 0
        self.size = 0
        self.seconds = 0.0

    def run(self) -> None:
        while not self.halt.wait(1.0):
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                self.size = len(answer.read())
            self.seconds += time.perf_counter() - started
            self.scrapes += 1


def one(args: argparse.Namespace, metrics: bool) -> tuple[float, float]:
    """(produce records/s, consume records/s) of one fresh broker."""
    extra, scraper = [], None
    if metrics:
        port = free_port()
        extra = [f"metrics.listener=127.0.0.1:{port}"]
    broker = start_strom(args.durability, extra)
    try:
        if metrics:
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
            scraper.start()
        topic = f"metrics-cost-{secrets.token_hex(3)}"
        create_topic(broker.bootstrap, topic, args.partitions, 1)
        produce_s = produce(broker.bootstrap, topic, args.records, args.record_bytes)
        consume_s = consume(broker.bootstrap, topic, args.partitions, args.records)
    finally:
        if scraper is not None:
            scraper.halt.set()
            scraper.join()
            mean_ms = 1000 * scraper.seconds / max(scraper.scrapes, 1)
            log(f"{scraper.scrapes} scrapes of {scraper.size:,} bytes, {mean_ms:.1f} ms each")
        stop(broker)
    rates = (args.records / produce_s, args.records / consume_s)
    state = "on " if metrics else "off"
    log(f"metrics {state}: produce {rates[0]:,.0f}/s consume {rates[1]:,.0f}/s")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--durability", choices=sorted(DURABILITY_SETTINGS), default="fsync")
    args = parser.parse_args()
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.rounds):
        for metrics in (False, True):
            runs[metrics].append(one(args, metrics))
    print(f"{'':>12} {'produce rec/s (median, all)':>40} {'consume rec/s (median, all)':>40}")
    medians = {}
    for metrics, label in ((False, "metrics off"), (True, "metrics on")):
        cells = []
        for i in (0, 1):
            values = [r[i] for r in runs[metrics]]
            medians[metrics, i] = statistics.median(values)
            every = ", ".join(f"{v / 1000:.0f}k" for v in values)
            cells.append(f"{medians[metrics, i]:,.0f} ({every})")
        print(f"{label:>12} {cells[0]:>40} {cells[1]:>40}")
    ratios = [medians[True, i] / medians[False, i] for i in (0, 1)]
    print(f"{'on / off':>12} {ratios[0]:>40.2f} {ratios[1]:>40.2f}")
    print(f"command: {shlex.join(['python', *sys.argv])}")


if __name__ == "__main__":
    main()
