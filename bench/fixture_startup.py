"""How fast strom.testing gives a test a cluster: start-up, first write, and teardown.

    .venv/bin/python bench/fixture_startup.py [--rounds 7] [--nodes 1,3] [--json FILE]

For each cluster size, in-process nodes (StromCluster's default: threads of this
process) and child-process nodes (processes=True: one `strom serve` each) start in
alternation, A B A B, each round on fresh data directories. Figures per start:

  start        StromCluster.start(): every node serves clients
  first write  then a topic created (replication factor min(3, nodes)) and one record
               acknowledged by confluent-kafka with acks=all
  close        StromCluster.close(): every node stopped, the data removed

Each figure's median and spread (min-max) over the rounds, and the ratio of the medians
(in-process / child processes). The first round of each kind is a warm-up and is not
counted. The last line printed is the exact command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from strom.testing import StromCluster

FIGURES = ("start", "first write", "close")


def one_round(nodes: int, processes: bool) -> dict[str, float]:
    began = time.perf_counter()
    cluster = StromCluster(nodes=nodes, processes=processes)
    cluster.start()
    started = time.perf_counter()
    try:
        cluster.create_topic("first", replication_factor=min(3, nodes))
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0}
        )
        producer.produce("first", b"hello")
        if producer.flush(30) != 0:
            raise RuntimeError("the first record was not acknowledged")
        written = time.perf_counter()
    finally:
        closing = time.perf_counter()
        cluster.close()
    closed = time.perf_counter()
    return {
        "start": 1000 * (started - began),
        "first write": 1000 * (written - started),
        "close": 1000 * (closed - closing),
    }


def summary(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.0f} ms ({min(samples):.0f}-{max(samples):.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--nodes", default="1,3")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    for nodes in (int(n) for n in args.nodes.split(",")):
        runs: dict[str, dict[str, list[float]]] = {
            kind: {f: [] for f in FIGURES} for kind in ("in-process", "processes")
        }
        for round_ in range(args.rounds + 1):
            for kind in ("in-process", "processes"):
                figures = one_round(nodes, processes=kind == "processes")
                if round_ > 0:  # round 0 warms caches and imports
                    for name, value in figures.items():
                        runs[kind][name].append(value)
        results[str(nodes)] = runs
        print(f"\n{nodes} node(s), {args.rounds} rounds, median (min-max):")
        print(f"  {'':12} {'in-process':>24} {'child processes':>24}  ratio")
        for name in FIGURES:
            a, b = runs["in-process"][name], runs["processes"][name]
            ratio = statistics.median(a) / statistics.median(b)
            print(f"  {name:12} {summary(a):>24} {summary(b):>24}  {ratio:.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    print("\ncommand: .venv/bin/python bench/fixture_startup.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
